"""The install: its manifests here, `crd` (the TorchJob CRD, generated from the model), `kubeflow_crd`
(Kubeflow's PyTorchJob CRD as served), `owner` (whose install the cluster-wide objects are, checked before
applying) and `uninstall`.

What `torchjob install` applies: the CRD (generated from the model), least-privilege RBAC,
the operator Deployment and its Services (progress, metrics); with `kubeflow_api`, also Kubeflow's
`pytorchjobs.kubeflow.org` CRD (kube/objects/install/kubeflow_crd.py) and a ClusterRole of its own for it.
The Helm chart in charts/torchjob renders the same objects for the same settings (its values.yaml;
tests/kube/test_chart.py renders both with `helm template` and compares them).

The rules are those the operator's calls need and no more: tests/e2e/test_in_cluster.py collects the
operator ServiceAccount's calls from the API server's audit log and fails on a rule never used or a
call refused. Where the object's name is known beforehand (the Lease, the TLS Secret, the CA
ConfigMap), `get`/`update`/`patch` are pinned to it; `create` cannot be (RBAC sees no name on a create).
With `watch_namespaces`, the namespaced rules are Roles in those namespaces only (no cluster-wide
pod rights) and the operator watches only them (`--namespace`, repeated)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchjob.api.defaults import INIT_IMAGE
from torchjob.kube.objects.install import kubeflow_crd
from torchjob.kube.objects.install.crd import GROUP, PLURAL, crd
from torchjob.version import __version__

NAMESPACE = "torchjob-system"
NAME = "torchjob-operator"
KUBEFLOW_NAME = f"{NAME}-kubeflow"  # the ClusterRole (and its binding) for Kubeflow's PyTorchJob API
METRICS_READER = "torchjob-metrics-reader"  # what a scraper's ServiceAccount is bound to, to read /metrics
METRICS_SERVICE = f"{NAME}-metrics"
DEFAULT_IMAGE = f"torchjob/operator:{__version__}"
PROGRESS_PORT = 8443
METRICS_PORT = 8080
HEALTH_PORT = 8081  # /healthz and /readyz: the probes' port, on no Service
LEADER_LABEL = "torchjob.dev/leader"  # on the leader's pod (=true), which the progress Service selects
# Who may reach /metrics through the NetworkPolicy: the namespace Prometheus runs in (the chart's
# networkPolicy.metricsNamespaceSelector)
METRICS_NAMESPACE_SELECTOR: dict[str, Any] = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
DEFAULT_PROGRESS_URL = f"https://{NAME}.{NAMESPACE}.svc:{PROGRESS_PORT}"  # what pods report progress to
LEASE = NAME  # kube/controller/process/operator.py's LEASE_NAME
TLS_SECRET = "torchjob-progress-tls"  # kube/progress/tls.py's SECRET
KUBEFLOW_LEASE = "1ca428e5.training-operator.kubeflow.org"  # kube/served/kubeflow_api.py's (in `kubeflow`)
CA_CONFIGMAP = "torchjob-progress-ca"  # kube/objects/workload/reporting.py's (one in each job namespace)
INPLACE_CONFIGMAP = "torchjob-inplace"  # kube/objects/front/shipped.py's (in each job namespace: the programs in pods)
RBAC = "rbac.authorization.k8s.io/v1"

# The operator's flags as the chart's values name them, with their defaults (those of `torchjob
# operator`): every one is written into the Deployment, so what runs is readable there.
OPERATOR_FLAGS: dict[str, Any] = {
    "initImage": INIT_IMAGE, "waitForMaster": True, "workers": 4, "leaseDuration": 15,
    "gangSchedulerName": "", "forceDeleteAfter": 60, "progressPort": PROGRESS_PORT,
    "progressWriteInterval": 5, "metricsPort": METRICS_PORT, "metricsAuth": True, "metricsTls": True,
    "healthPort": HEALTH_PORT,
}

# Rules on objects in the namespaces jobs live in (a ClusterRole, or a Role in each watched namespace).
JOB_RULES: list[dict[str, Any]] = [
    # patch: a job under a Kueue queue is suspended before any of its pods exists; delete: ttlSecondsAfterFinished
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch", "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},  # merge patch and apply
    # pods and Services are made with blockOwnerDeletion, which OwnerReferencesPermissionEnforcement checks
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # get: whose is the pod or Service a create answered 409 for
    # patch: a pod restarting in place is told its next attempt (objects/inplace.py)
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
    # a stalled job's stacks, answered in its pods' logs (controller/stall_stacks.py); no pods/exec
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create"]},
    # a TrainJob's workspace (spec.volumeClaims); get: whose is the claim a create answered 409 for
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create"]},  # TensorBoard
    # Volcano's PodGroups and Kueue's Workloads are watched from the first one made or found
    # (kube/controller/round/gates.py); a scheduler-plugins PodGroup is never waited for, so never watched:
    # made, read after a 409 (whose is it), deleted when its job ends or is suspended
    {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
     "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "create"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["patch"]},  # Finished
    # the progress endpoint's CA, published in each job namespace (and the in-place entry point); one
    # someone changed is deleted and made again (controller/configmaps.py)
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CA_CONFIGMAP, INPLACE_CONFIGMAP],
     "verbs": ["get", "delete"]},
]
# Rules on cluster-scoped objects: always a ClusterRole.
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["get"]},  # their node labels
    # the progress endpoint: the reporting pods' tokens, checked by the API server.
    # /metrics: a scraper's token, checked (TokenReview), and whether its user may get /metrics.
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    # whether Trainer v2's TrainJob and T9k's PyTorchTrainingJob CRDs are torchjob's (kube/served/trainer_api.py,
    # t9k.py): asked whatever was installed, so that installing one later needs no new grant; by name
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": ["trainjobs.trainer.kubeflow.org", "pytorchtrainingjobs.batch.tensorstack.dev"],
     "verbs": ["get"]},
]
RULES: list[dict[str, Any]] = [*JOB_RULES, *CLUSTER_RULES]  # the ClusterRole of an install that watches all
# In the operator's own namespace: its Lease and its progress endpoint's TLS Secret.
LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    # watch: a candidate takes a Lease given up at once (machinery/leader.py)
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [LEASE],
     "verbs": ["get", "update", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [TLS_SECRET], "verbs": ["get", "patch"]},
    # the leader labels its own pod (LEADER_LABEL, which the progress Service selects) and takes the label
    # off any other pod that still has it (a leader that died with it)
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]},
]
# Serving Kubeflow's PyTorchJobs: the verbs on TorchJobs but patch (a queued PyTorchJob is Kueue's own
# integration's to suspend and resume: ServedKind.own_kueue), and the owner's finalizers.
KUBEFLOW_JOB_RULES: list[dict[str, Any]] = [
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [kubeflow_crd.PLURAL], "verbs": ["list", "watch", "delete"]},
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [f"{kubeflow_crd.PLURAL}/status"], "verbs": ["patch"]},
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [f"{kubeflow_crd.PLURAL}/finalizers"], "verbs": ["update"]},
]
KUBEFLOW_CLUSTER_RULES: list[dict[str, Any]] = [
    # --kubeflow-api (on or auto) reads who installed the CRD, and whether Kubeflow's training-operator holds
    # its Lease (kube/served/kubeflow_api.py): both by name
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": [kubeflow_crd.CRD_NAME], "verbs": ["get"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [KUBEFLOW_LEASE],
     "verbs": ["get"]},
]
KUBEFLOW_RULES: list[dict[str, Any]] = [*KUBEFLOW_JOB_RULES, *KUBEFLOW_CLUSTER_RULES]

# What a namespace's editors and viewers may do with jobs (aggregated into the built-in admin, edit
# and view ClusterRoles): creating a job is creating pods in that namespace, which editors may anyway.
EDIT_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
VIEW_VERBS = ["get", "list", "watch"]


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {}), **({"labels": labels} if labels else {})}


def _binding(kind: str, name: str, sa_namespace: str, namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": f"{kind}Binding", "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": sa_namespace}]}


def roles(name: str, job_rules: list[dict[str, Any]], cluster_rules: list[dict[str, Any]], namespace: str,
           watch_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The operator ServiceAccount's rights under `name`: a ClusterRole (and binding) with every rule where
    all namespaces are watched; else one with the cluster-scoped rules only and a Role (and binding) with
    the job rules in each watched namespace. Each served API's install adds its own (kube/served)."""
    if not watch_namespaces:
        return [{"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(name),
                 "rules": [*job_rules, *cluster_rules]}, _binding("ClusterRole", name, namespace)]
    out = [{"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(name), "rules": cluster_rules},
           _binding("ClusterRole", name, namespace)]
    for ns in watch_namespaces:
        out += [{"apiVersion": RBAC, "kind": "Role", "metadata": _meta(name, ns), "rules": job_rules},
                _binding("Role", name, namespace, ns)]
    return out


def aggregated(group: str, plural: str, prefix: str) -> list[dict[str, Any]]:
    """`prefix`-edit and -view, aggregated into the built-in admin, edit and view ClusterRoles."""
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    return [
        {"apiVersion": RBAC, "kind": "ClusterRole",
         "metadata": _meta(f"{prefix}-edit", labels={f"{agg}admin": "true", f"{agg}edit": "true"}),
         "rules": [{"apiGroups": [group], "resources": [plural], "verbs": EDIT_VERBS},
                   {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": VIEW_VERBS}]},
        {"apiVersion": RBAC, "kind": "ClusterRole",
         "metadata": _meta(f"{prefix}-view", labels={f"{agg}view": "true"}),
         "rules": [{"apiGroups": [group], "resources": [plural, f"{plural}/status"], "verbs": VIEW_VERBS}]},
    ]


def kubeflow_api_objects(namespace: str = NAMESPACE, watch_namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
    """What serving Kubeflow's PyTorchJob API adds: its CRD, its RBAC for the operator's
    ServiceAccount, and the aggregated roles that let a namespace's editors make PyTorchJobs."""
    return [kubeflow_crd.crd(),
            *roles(KUBEFLOW_NAME, KUBEFLOW_JOB_RULES, KUBEFLOW_CLUSTER_RULES, namespace, watch_namespaces),
            *aggregated(kubeflow_crd.GROUP, kubeflow_crd.PLURAL, "torchjob-pytorchjobs")]


def operator_args(namespace: str, watch_namespaces: Sequence[str] = (), flags: dict[str, Any] | None = None,
                  args: Sequence[str] = (), kubeflow_api: bool = False) -> list[str]:
    """The Deployment's command: `torchjob operator` and every flag (the chart's templates write the same)."""
    f = {**OPERATOR_FLAGS, **(flags or {})}
    unknown = sorted(set(f) - set(OPERATOR_FLAGS))
    if unknown:
        raise ValueError(f"unknown operator settings {unknown}: the known ones are {sorted(OPERATOR_FLAGS)}")
    # Without Kubeflow's API installed the operator does not look for it (no rule to read its CRD).
    cmd = ["torchjob", "operator", "--leader-elect", "--lease-namespace", namespace,
           "--kubeflow-api", "on" if kubeflow_api else "off"]
    for ns in watch_namespaces:
        cmd += ["--namespace", ns]
    cmd += ["--metrics-port", str(f["metricsPort"]), "--metrics-auth" if f["metricsAuth"] else "--no-metrics-auth",
            "--metrics-tls" if f["metricsTls"] else "--no-metrics-tls", "--health-port", str(f["healthPort"]),
            "--progress-port", str(f["progressPort"]), "--progress-write-interval", str(f["progressWriteInterval"]),
            "--init-image", str(f["initImage"]),
            "--wait-for-master" if f["waitForMaster"] else "--no-wait-for-master",
            "--workers", str(f["workers"]), "--lease-duration", str(f["leaseDuration"]),
            "--force-delete-after", str(f["forceDeleteAfter"])]
    if f["gangSchedulerName"]:
        cmd += ["--gang-scheduler-name", str(f["gangSchedulerName"])]
    return [*cmd, *args]


def manifests(image: str = DEFAULT_IMAGE, namespace: str = NAMESPACE, replicas: int = 1,
              args: list[str] | None = None, kubeflow_api: bool = False, crd_only: bool = False,
              watch_namespaces: Sequence[str] = (), flags: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`args`: more `torchjob operator` flags (e.g. --gang-scheduler-name volcano), after the named ones.
    `kubeflow_api`: also Kubeflow's PyTorchJob CRD and its RBAC. `crd_only`: the CRDs alone
    (TorchJob's, and Kubeflow's with `kubeflow_api`). `watch_namespaces`: the namespaces the operator
    watches (none: all). `flags`: the operator's flags by their chart names (OPERATOR_FLAGS).
    The CRDs come first, TorchJob's at [0]."""
    kubeflow = kubeflow_api_objects(namespace, watch_namespaces) if kubeflow_api else []
    crds = [crd(), *(o for o in kubeflow if o["kind"] == "CustomResourceDefinition")]
    if crd_only:
        return crds
    command = operator_args(namespace, watch_namespaces, flags, args or (), kubeflow_api)
    settings = {**OPERATOR_FLAGS, **(flags or {})}
    return [*crds, *_operator(image, namespace, replicas, command, watch_namespaces, settings),
            *(o for o in kubeflow if o["kind"] != "CustomResourceDefinition")]


# The chart's default securityContext: what Pod Security `restricted` asks of a container, and a
# read-only root (the image's user is 65532; the TLS key goes to the writable /tmp).
SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
    "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
# The in-cluster credentials, as the ServiceAccount admission plugin would mount them, said in the
# pod itself: a cluster where that plugin is off (the dev cluster's) runs the operator too.
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME: dict[str, Any] = {"name": "token", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                  "fieldPath": "metadata.namespace"}}]}}]}}
RESOURCES: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def _operator(image: str, namespace: str, replicas: int, command: list[str], watch_namespaces: Sequence[str],
              flags: dict[str, Any]) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        *roles(NAME, JOB_RULES, CLUSTER_RULES, namespace, watch_namespaces),
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(METRICS_READER),
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        *aggregated(GROUP, PLURAL, "torchjob-torchjobs"),
        {"apiVersion": RBAC, "kind": "Role", "metadata": _meta(NAME, namespace), "rules": LEASE_RULES},
        _binding("Role", NAME, namespace, namespace),
        {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(NAME, namespace, labels),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                # Every working replica is ready (the Lease, not readiness, says who leads): one new
                # replica at a time, an old one going only once it is ready; the leader hands its
                # Lease over on SIGTERM.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "automountServiceAccountToken": False,  # the token volume below, said explicitly
                        "containers": [{
                            "name": "operator",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": command,
                            # this pod's name: the leader labels its own pod
                            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {
                                "apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                            "ports": [{"name": "http", "containerPort": flags["metricsPort"]},
                                      {"name": "health", "containerPort": flags["healthPort"]},
                                      {"name": "progress", "containerPort": flags["progressPort"]}],
                            # the TLS key is loaded from a private temp file: a writable /tmp
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                             {"name": "token", "mountPath": SA_DIR, "readOnly": True}],
                            # 3 s, not the kubelet's 1: under a flood of the port (bench/progress_flood.py)
                            # an answer took up to 1 s
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}, "timeoutSeconds": 3},
                            # every replica that works is ready, leader or not
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 2,
                                               "timeoutSeconds": 3},
                            "resources": RESOURCES,
                            "securityContext": SECURITY_CONTEXT,
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {}}, TOKEN_VOLUME],
                    },
                },
            },
        },
        # Pods report progress here: to the leader alone, which labels its pod. Headless: the name
        # resolves to the leader's pod itself, with or without kube-proxy.
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(NAME, namespace, labels),
         "spec": {"clusterIP": "None", "selector": {**labels, LEADER_LABEL: "true"},
                  "ports": [{"name": "progress", "port": flags["progressPort"], "targetPort": "progress"}]}},
        # /metrics of every replica (not only the leader's): a scraper's endpoints are the pods, ready or not
        {"apiVersion": "v1", "kind": "Service",
         "metadata": _meta(METRICS_SERVICE, namespace, {**labels, "app.kubernetes.io/component": "metrics"}),
         "spec": {"clusterIP": "None", "selector": labels, "publishNotReadyAddresses": True,
                  "ports": [{"name": "http", "port": flags["metricsPort"], "targetPort": "http"}]}},
        *_disruption_budget(namespace, replicas, labels),
        _network_policy(namespace, watch_namespaces, labels),
    ]


def _network_policy(namespace: str, watch_namespaces: Sequence[str], labels: dict[str, str]) -> dict[str, Any]:
    """Into the operator's pods: the progress port from the watched namespaces' pods (all, when none is
    named), the metrics port from METRICS_NAMESPACE_SELECTOR's namespaces, the health port from no pod
    (the kubelet probes from the node)."""
    reporters: dict[str, Any] = ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                        "values": list(watch_namespaces)}]}
                                 if watch_namespaces else {})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(NAME, namespace),
            "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": [
                {"ports": [{"port": "progress", "protocol": "TCP"}], "from": [{"namespaceSelector": reporters}]},
                {"ports": [{"port": "http", "protocol": "TCP"}],
                 "from": [{"namespaceSelector": METRICS_NAMESPACE_SELECTOR}]}]}}


def _disruption_budget(namespace: str, replicas: int, labels: dict[str, str]) -> list[dict[str, Any]]:
    """With two replicas or more, a drain keeps one running (every working replica is ready)."""
    if replicas < 2:
        return []
    return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(NAME, namespace, labels),
             "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}]


def apply(objs: list[dict[str, Any]], kubeconfig: str | None = None) -> list[str]:
    """Server-side apply every object; returns `kind/name` of each."""
    from lightkube import Client, KubeConfig, codecs

    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    client = Client(config=config, field_manager="torchjob-install")
    done = []
    for data in objs:
        obj = codecs.from_dict(data)
        client.apply(obj, force=True)
        done.append(f"{data['kind']}/{data['metadata']['name']}")
    return done
