"""A release as a platform engineer installs it, walked on a dev cluster of its own with a real OCI
registry (`dev-cluster.sh up --real-node --registry`: the CNCF distribution registry at localhost:5000,
which the node's containerd pulls from over plain HTTP): the operator's image pushed there
(`operator-image --push`), the chart packaged (`scripts/release.sh chart`, as the release workflow does)
and pushed there (`helm push oci://`), installed from it by Helm with the image pulled from it, and a
job run by that operator. Then the bad input: `torchjob install --image` of an image the registry does
not hold fails within a bound, naming the image and the fix; and one of an operator that crashes says so
with the container's exit code and last lines.

The commands are docs/operator/install.md's own blocks (claimed by this test). Its own state dir and pod
subnet (TORCHJOB_REGISTRY_DEVCLUSTER_DIR, TORCHJOB_REGISTRY_POD_SUBNET): it runs beside tests/e2e's and
tests/incluster's real nodes, in a scope of its own (tests/conftest.py's SHARED_CLUSTER)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from tests.docs import blocks
from tests.kube.conftest import ENABLED, REPO
from torchjob.kube.objects import install
from torchjob.version import __version__

STATE = Path(os.environ.get("TORCHJOB_REGISTRY_DEVCLUSTER_DIR", "/tmp/torchjob-devcluster-registry"))
# beside tests/e2e's 10.250.N, tests/incluster's 10.254, the benches' 10.249/10.251/10.252, 10.253 (dev-cluster tests)
SUBNET = os.environ.get("TORCHJOB_REGISTRY_POD_SUBNET", "10.247.0.0/24")
ENV = {"TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_POD_SUBNET": SUBNET, "DEVCLUSTER_KWOK": "0"}
PAGE = REPO / "docs" / "operator" / "install.md"
TEST = "tests/incluster/test_registry.py::test_a_release_through_a_registry"
SYSTEM = "torchjob-system"
BAD_IMAGE = "localhost:5000/torchjob-operator:no-such-tag"
BAD_BOUND = 90  # seconds: an image that cannot be pulled is told long before --timeout


def run(argv: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    if not ENABLED:
        pytest.skip("the registry walk needs the real-node dev cluster: set TORCHJOB_KUBE_TESTS=1 (root)")
    if os.geteuid() != 0:
        pytest.skip("the real node (containerd, kubelet, a bridge) needs root")
    base = {**os.environ, **ENV}
    bins = run(["bash", "scripts/dev-cluster.sh", "bin"], base).stdout.strip()
    venv_bin = str(Path(sys.executable).parent)  # `torchjob` as installed beside this interpreter
    path = {"PATH": f"{bins}:{venv_bin}:{os.environ.get('PATH', '')}"}
    try:
        yield {**base, **path, "KUBECONFIG": str(STATE / "kubeconfig")}
    finally:
        down = run(["bash", "scripts/dev-cluster.sh", "down"], base, timeout=300)
        print(down.stderr[-2000:])


@pytest.mark.timeout(1200)  # a first run builds the operator image (minutes); then about 3 min
def test_a_release_through_a_registry(env: dict[str, str]) -> None:
    up, push, helm_install = blocks.tested(PAGE, TEST, "sh")
    expected_error = blocks.tested(PAGE, TEST, "text")[0]
    timings: dict[str, float] = {}

    t0 = time.monotonic()
    if (STATE / "components").exists() and "registry" not in (STATE / "components").read_text():
        run(["bash", "scripts/dev-cluster.sh", "down"], env, timeout=300)  # a cluster of this dir, without one
    out = run(["bash", "-ec", up], env, timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    timings["up"] = time.monotonic() - t0

    t0 = time.monotonic()
    out = run(["bash", "-ec", push], env, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    timings["push image and chart"] = time.monotonic() - t0
    catalog = run(["curl", "-sf", "http://127.0.0.1:5000/v2/_catalog"], env)
    assert '"charts/torchjob"' in catalog.stdout and '"torchjob-operator"' in catalog.stdout, catalog.stdout
    # the node holds no image of the pushed name: the operator's pod has to pull it from the registry
    images = run(["ctr", "--address", str(STATE / "realnode/containerd/containerd.sock"), "-n", "k8s.io",
                  "images", "ls", "-q"], env)
    assert f"localhost:5000/torchjob-operator:{__version__}" not in images.stdout.split()

    t0 = time.monotonic()
    out = run(["bash", "-ec", helm_install], env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    timings["helm install --wait"] = time.monotonic() - t0
    assert f"Pulled: localhost:5000/charts/torchjob:{__version__}" in out.stdout + out.stderr
    image = f"localhost:5000/torchjob-operator:{__version__}"
    assert f"operator: {__version__} (image {image}, namespace {SYSTEM}, 1/1 ready)" in out.stdout, out.stdout

    client = Client(config=KubeConfig.from_file(env["KUBECONFIG"]))
    deployment = client.get(Deployment, install.NAME, namespace=SYSTEM)
    assert deployment.spec.template.spec.containers[0].image == image
    pods = list(client.list(Pod, namespace=SYSTEM, labels={"app.kubernetes.io/name": install.NAME}))
    pulled = [e.message or "" for e in client.list(Event, namespace=SYSTEM)
              if e.reason == "Pulled" and e.involvedObject.name in {p.metadata.name for p in pods}]
    assert any(f'Successfully pulled image "{image}"' in m for m in pulled), pulled
    log = (STATE / "registry.log").read_text()
    assert f"/v2/torchjob-operator/manifests/{__version__}" in log, "the node resolved the image at the registry"

    # a job, run by the operator that came from the registry (torch.distributed over gloo in real pods)
    job = Path(env["TORCHJOB_DEVCLUSTER_DIR"]) / "registry-job.yaml"
    job.write_text(JOB)
    t0 = time.monotonic()
    out = run(["torchjob", "run", "--kube", "-n", "default", str(job)], env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    timings["job"] = time.monotonic() - t0
    print(f"registry walk timings so far: {timings}")
    logs = run(["torchjob", "logs", "--kube", "-n", "default", "from-the-registry", "--replica", "worker-0"], env)
    assert "sum 2.0" in logs.stdout, logs.stdout + logs.stderr

    # an install into another namespace while Helm's release runs the operator: refused, nothing applied
    # (its bindings would be re-pointed at the new namespace's ServiceAccount); then as its fix says
    out = run(["torchjob", "install", "--image", BAD_IMAGE, "--namespace", "torchjob-bad", "--no-wait"], env)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert "ClusterRoleBinding torchjob-operator belongs to the torchjob install in namespace torchjob-system" \
        in out.stderr and f"helm uninstall -n {SYSTEM} torchjob" in out.stderr, out.stderr
    assert out.stdout == ""
    out = run(["helm", "uninstall", "-n", SYSTEM, "torchjob"], env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr

    # bad input: an image the registry does not hold, in a namespace of its own
    t0 = time.monotonic()
    out = run(["torchjob", "install", "--image", BAD_IMAGE, "--namespace", "torchjob-bad", "--timeout", "300"], env,
              timeout=400)
    took = time.monotonic() - t0
    timings["install of an unpullable image"] = took
    assert out.returncode == 1, out.stdout + out.stderr
    assert took < BAD_BOUND, f"told after {took:.0f} s"
    said = [line for line in out.stderr.splitlines() if line.startswith(("error: ", "    fix: "))]
    want = expected_error.splitlines()
    assert said[1] == want[1], "the fix, word for word as install.md says it"
    head = re.escape(want[0].split(" (", 1)[0]).replace("6c57744988\\-hlgfh", "[a-z0-9]+\\-[a-z0-9]+")
    assert re.fullmatch(head + r" \((?:ErrImagePull|ImagePullBackOff): .*\)", said[0]), said[0]
    assert BAD_IMAGE in said[0]

    # and an operator that crashes (a flag it does not know): its exit code and its last words, in a
    # namespace of its own once the unpullable install's binding is gone (as the refusal's fix says)
    client.delete(ClusterRoleBinding, install.NAME)
    t0 = time.monotonic()
    out = run(["torchjob", "install", "--image", image, "--namespace", "torchjob-crash", "--timeout", "300",
               "--operator-arg=--no-such-flag"], env, timeout=400)
    took = timings["install of a crashing operator"] = time.monotonic() - t0
    assert out.returncode == 1, out.stdout + out.stderr
    assert took < BAD_BOUND, f"told after {took:.0f} s"
    assert "the operator's container keeps exiting (exit code 2;" in out.stderr, out.stderr
    assert "Error: No such option '--no-such-flag'." in out.stderr and "--previous" in out.stderr
    print("registry walk timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


JOB = """\
apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: from-the-registry
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: localhost/torchjob-e2e:dev
              imagePullPolicy: Never
              command: [python, -c, "import torch, torch.distributed as d; d.init_process_group('gloo');
                t = torch.ones(1); d.all_reduce(t); print('sum', t.item())"]
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: localhost/torchjob-e2e:dev
              imagePullPolicy: Never
              command: [python, -c, "import torch, torch.distributed as d; d.init_process_group('gloo');
                t = torch.ones(1); d.all_reduce(t); print('sum', t.item())"]
"""
