"""The images the real-node tests run, made locally by `scripts/dev-cluster.sh image` (nothing can
be pulled here). Each is the dev node's Debian root file system with `python` and `torchrun`
(hack/realnode/images.py `"python": true`) plus the code its users would have put in it.

The seed documents name public images whose code is not ours (a Kubeflow test image, Katib's
MNIST example, the pytorch/pytorch images with a user's script). Here each name is a stand-in
that carries a script doing what that code does, at the path the document expects, so that the
document itself runs unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.trainjob_initializers import TAG as INITIALIZERS_TAG

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "programs"
E2E_PROGRAMS = Path(__file__).resolve().parent / "programs"
TESTS_IMAGE = "localhost/torchjob-tests:dev"
HUB = PROGRAMS / "hub"  # what the stand-in initializers serve (tests/trainjob_initializers.py)


def _image(name: str, files: dict[str, Path], **config: Any) -> dict[str, Any]:
    return {"name": name, "rootfs": True, "python": True,
            "files": [{"path": path, "source": str(src)} for path, src in files.items()], "config": config}


STANDINS: list[dict[str, Any]] = [
    # The tests' own programs, for documents written by the tests.
    _image(TESTS_IMAGE, {
        "/opt/tests/ddp_step.py": PROGRAMS / "ddp_step.py",
        "/opt/tests/behave.py": PROGRAMS / "behave.py",
        "/opt/tests/ddp_progress.py": PROGRAMS / "ddp_progress.py",
        # torchjob's reporting helper copied alone, as a user would into an image (a namespace package)
        "/opt/tests/torchjob/report.py": REPO / "src" / "torchjob" / "report.py",
        "/opt/tests/elastic.py": E2E_PROGRAMS / "elastic.py",
        "/opt/tests/dist_sendrecv.py": REPO / "examples" / "volcano" / "dist_sendrecv.py",
        "/opt/tests/examples/ddp/train.py": REPO / "examples" / "ddp" / "train.py",
    }, WorkingDir="/opt/tests"),
    # Seed 000: no command; the image's entrypoint runs its send/recv test.
    _image("gcr.io/kubeflow-ci/pytorch-dist-sendrecv-test:1.0",
           {"/opt/pytorch-dist-sendrecv/dist_sendrecv.py": REPO / "examples" / "volcano" / "dist_sendrecv.py"},
           Entrypoint=["python", "/opt/pytorch-dist-sendrecv/dist_sendrecv.py"]),
    # Seed 001 mounts its script from a ConfigMap at /workspace; examples/ddp/job.yaml runs
    # `python examples/ddp/train.py` in the image's working directory, as a user's image would.
    _image("docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
           {"/workspace/examples/ddp/train.py": REPO / "examples" / "ddp" / "train.py"}, WorkingDir="/workspace"),
    # Seed 003: `python dist_mnist.py` in the working directory.
    _image("docker.io/pytorch/pytorch:2.0.0-cuda11.7-cudnn8-devel",
           {"/workspace/dist_mnist.py": PROGRAMS / "ddp_step.py"}, WorkingDir="/workspace"),
    # Seed 004: `python3 /opt/pytorch-mnist/mnist.py --epochs=1`.
    _image("docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
           {"/opt/pytorch-mnist/mnist.py": REPO / "examples" / "ddp" / "train.py"}),
    # Kubeflow Trainer's initializers (their entrypoint `python -m pkg.initializers.dataset|model`): a
    # stand-in that reads the same env (STORAGE_URI hf://ORG/NAME, IGNORE_PATTERNS) and writes where they
    # write (/workspace/dataset, /workspace/model), copying from a hub baked in at /opt/hub: no hub can be
    # reached here (tests/trainjob_initializers.py).
    *(_image(f"ghcr.io/kubeflow/trainer/{kind}-initializer:{INITIALIZERS_TAG}", {
        "/opt/initializer/initializer.py": PROGRAMS / "initializer.py",
        **{f"/opt/hub/{f.relative_to(HUB)}": f for f in sorted(HUB.rglob("*")) if f.is_file()},
    }, Entrypoint=["python", "/opt/initializer/initializer.py", kind]) for kind in ("dataset", "model")),
]
