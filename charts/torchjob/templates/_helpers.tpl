{{/* The objects' names are fixed (torchjob-operator): the operator's Lease, TLS Secret and progress
Service are named so, and one operator serves a cluster. */}}
{{- define "torchjob.name" -}}torchjob-operator{{- end }}

{{- define "torchjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default "torchjob-operator" .Values.serviceAccount.name }}
{{- else -}}{{ required "serviceAccount.name: the ServiceAccount to run as, when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "torchjob.selectorLabels" -}}
app.kubernetes.io/name: torchjob-operator
{{- end }}

{{/* Helm's own labels: tests/kube/test_chart.py leaves them out when it compares the chart with `torchjob install`. */}}
{{- define "torchjob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "torchjob.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}
{{- end }}

{{/* A ClusterRole (and binding) with every rule where all namespaces are watched; else one with the
cluster-scoped rules and a Role (and binding) with the job rules in each watched namespace.
Arguments: root, name, jobRules, clusterRules (names of templates in _rules.tpl). */}}
{{- define "torchjob.roles" -}}
{{- $root := .root }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    {{- include "torchjob.labels" $root | nindent 4 }}
rules:
{{- if not $root.Values.watchNamespaces }}
{{- include .jobRules $root | nindent 0 }}
{{- end }}
{{- include .clusterRules $root | nindent 0 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "torchjob.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
- kind: ServiceAccount
  name: {{ include "torchjob.serviceAccountName" $root }}
  namespace: {{ $root.Release.Namespace }}
{{- range $root.Values.watchNamespaces }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $.name }}
  namespace: {{ . }}
  labels:
    {{- include "torchjob.labels" $root | nindent 4 }}
rules:
{{- include $.jobRules $root | nindent 0 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $.name }}
  namespace: {{ . }}
  labels:
    {{- include "torchjob.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $.name }}
subjects:
- kind: ServiceAccount
  name: {{ include "torchjob.serviceAccountName" $root }}
  namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}
