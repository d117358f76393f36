"""What `torchjob install` applies: the CRD (generated from the model), least-privilege RBAC,
and the operator Deployment; with `kubeflow_api`, also Kubeflow's `pytorchjobs.kubeflow.org` CRD
(kube/objects/kubeflow_crd.py) and a ClusterRole of its own for it. The Helm chart in charts/torchjob
renders the same objects (the Kubeflow ones under the value `kubeflowApi.enabled`)."""

from __future__ import annotations

from typing import Any

from torchjob import __version__
from torchjob.kube.objects import kubeflow_crd
from torchjob.kube.objects.crd import GROUP, PLURAL, crd

NAMESPACE = "torchjob-system"
NAME = "torchjob-operator"
KUBEFLOW_NAME = f"{NAME}-kubeflow"  # the ClusterRole (and its binding) for Kubeflow's PyTorchJob API
METRICS_READER = "torchjob-metrics-reader"  # what a scraper's ServiceAccount is bound to, to read /metrics
DEFAULT_IMAGE = f"torchjob/operator:{__version__}"
PROGRESS_PORT = 8443
DEFAULT_PROGRESS_URL = f"https://{NAME}.{NAMESPACE}.svc:{PROGRESS_PORT}"  # what pods report progress to

RULES: list[dict[str, Any]] = [
    # patch: a job under a Kueue queue is suspended before any of its pods exists
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch", "update"]},
    # pods and Services are made with blockOwnerDeletion, which OwnerReferencesPermissionEnforcement checks
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "delete"]},  # TensorBoard
    {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
     "verbs": ["get", "list", "watch", "create", "delete"]},  # watched while jobs wait for admission
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "create"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["patch"]},  # Finished
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["get"]},  # their node labels
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["get", "create", "delete"]},
    # the progress endpoint: the reporting pods' tokens, checked by the API server; its CA, per namespace.
    # /metrics: a scraper's token, checked (TokenReview), and whether its user may get /metrics.
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
]
LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},  # the progress endpoint's TLS
]
# Serving Kubeflow's PyTorchJobs: the same verbs as on TorchJobs, and the owner's finalizers, which
# pods and Services made with blockOwnerDeletion need where OwnerReferencesPermissionEnforcement is on.
KUBEFLOW_RULES: list[dict[str, Any]] = [
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [kubeflow_crd.PLURAL],
     "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [f"{kubeflow_crd.PLURAL}/status"],
     "verbs": ["get", "patch", "update"]},
    {"apiGroups": [kubeflow_crd.GROUP], "resources": [f"{kubeflow_crd.PLURAL}/finalizers"], "verbs": ["update"]},
    # --kubeflow-api=auto reads who installed the CRD (kube/served/kubeflow_api.py)
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": [kubeflow_crd.CRD_NAME], "verbs": ["get"]},
]


def kubeflow_api_objects(namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """What serving Kubeflow's PyTorchJob API adds: its CRD, a ClusterRole for it, and the binding
    of that role to the operator's ServiceAccount."""
    return [
        kubeflow_crd.crd(),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": KUBEFLOW_NAME},
         "rules": KUBEFLOW_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": KUBEFLOW_NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBEFLOW_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
    ]


def manifests(image: str = DEFAULT_IMAGE, namespace: str = NAMESPACE, replicas: int = 1,
              args: list[str] | None = None, kubeflow_api: bool = False,
              crd_only: bool = False) -> list[dict[str, Any]]:
    """`args`: more `torchjob operator` flags (e.g. --gang-scheduler-name volcano), after the command.
    `kubeflow_api`: also Kubeflow's PyTorchJob CRD and its RBAC. `crd_only`: the CRDs alone
    (TorchJob's, and Kubeflow's with `kubeflow_api`). The CRDs come first, TorchJob's at [0]."""
    kubeflow = kubeflow_api_objects(namespace) if kubeflow_api else []
    crds = [crd(), *(o for o in kubeflow if o["kind"] == "CustomResourceDefinition")]
    if crd_only:
        return crds
    return [*crds, *_operator(image, namespace, replicas, args),
            *(o for o in kubeflow if o["kind"] != "CustomResourceDefinition")]


def _operator(image: str, namespace: str, replicas: int, args: list[str] | None) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME},
         "rules": RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": METRICS_READER},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": NAME, "namespace": namespace}, "rules": LEASE_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": NAME, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
        {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": namespace,
                                                                         "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "containers": [{
                            "name": "operator",
                            "image": image,
                            "command": ["torchjob", "operator", "--leader-elect", "--lease-namespace", namespace],
                            **({"args": list(args)} if args else {}),
                            "ports": [{"name": "http", "containerPort": 8080},
                                      {"name": "progress", "containerPort": PROGRESS_PORT}],
                            # the TLS key is loaded from a private temp file: a writable /tmp
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"memory": "512Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                                "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}},
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        },
        # Pods report progress here; only the leader is ready, so only it gets them.
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "progress", "port": PROGRESS_PORT,
                                                  "targetPort": "progress"}]}},
    ]


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
