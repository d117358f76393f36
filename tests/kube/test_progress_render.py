"""What pods get to report progress with, and what the operator needs for it (no cluster)."""

from __future__ import annotations

import ssl

from tests.jobs import make_job
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.objects.install import DEFAULT_PROGRESS_URL, LEASE_RULES, RULES, manifests
from torchjob.kube.objects.install.crd import crd
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.objects.workload.reporting import PROGRESS_DIR, PROGRESS_VOLUME
from torchjob.kube.progress.tls import covers, generate, hosts_for

URL = "https://torchjob-operator.torchjob-system.svc:8443"


def test_pods_get_trainers_variables_and_a_projected_token_with_the_jobs_audience() -> None:
    job = make_job("llm", workers=1)
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": "team-a"})})
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 2, progress_url=URL)
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == f"{URL}/apis/torchjob.dev/v1/namespaces/team-a/torchjobs/llm/status"
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/torchjob.dev/progress/token"
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/torchjob.dev/progress/ca.crt"
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == PROGRESS_VOLUME]
    token, ca = volume["projected"]["sources"]
    assert token["serviceAccountToken"] == {"audience": "torchjob.dev/v1/namespaces/team-a/torchjobs/llm/status",
                                            "expirationSeconds": 3600, "path": "token"}
    assert ca["configMap"]["name"] == "torchjob-progress-ca"
    assert {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR, "readOnly": True} in c["volumeMounts"]
    assert pod["spec"]["serviceAccountName"] == "default"  # a projected token needs one named
    # without an endpoint, nothing of it
    plain = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    assert PROGRESS_VOLUME not in [v["name"] for v in plain["spec"].get("volumes", [])]  # the stacks front's are
    assert not any(e["name"].startswith("KUBEFLOW_") for e in plain["spec"]["containers"][0]["env"])


def test_install_has_what_the_endpoint_needs() -> None:
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]} in RULES
    assert any("secrets" in r["resources"] for r in LEASE_RULES)
    objs = manifests()
    service = next(o for o in objs if o["kind"] == "Service")
    assert service["spec"]["ports"][0]["port"] == 8443 and DEFAULT_PROGRESS_URL.endswith(".svc:8443")
    columns = crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert {"name": "Progress%", "type": "number", "jsonPath": ".status.progress.percent"} in columns


def test_the_generated_certificate_is_valid_for_the_service() -> None:
    tls = generate(hosts_for("torchjob-operator", "torchjob-system"))
    server = tls.context()
    client = ssl.create_default_context(cadata=tls.ca_pem)
    import socket
    import threading

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True) as s:
                s.sendall(b"ok")

        threading.Thread(target=accept, daemon=True).start()
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client.wrap_socket(raw, server_hostname="torchjob-operator.torchjob-system.svc") as tls_sock:
            assert tls_sock.recv(2) == b"ok"


def test_a_certificate_covers_the_hosts_it_names_and_no_others() -> None:
    # The operator makes the certificate again when --progress-url names a host it lacks (an operator
    # outside the cluster, reached by the pods at the node's address).
    tls = generate([*hosts_for("torchjob-operator", "torchjob-system"), "10.250.0.1"])
    assert covers(tls.cert_pem, ["torchjob-operator.torchjob-system.svc", "127.0.0.1", "10.250.0.1"])
    assert not covers(tls.cert_pem, ["10.250.0.2"])
    assert not covers(generate(hosts_for("torchjob-operator", "torchjob-system")).cert_pem, ["10.250.0.1"])
