"""A cluster that cannot be reached, lacks the CRD or refuses: a message and a fix, never a traceback
(no cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
from lightkube.core.exceptions import ApiError

from tests.kube.conftest import free_port
from torchjob.kube.clientside.kube_runtime import explain

URL = "https://127.0.0.1:6443/apis/torchjob.dev/v1/namespaces/default/torchjobs"


def failed(code: int, body: dict[str, object] | None = None) -> httpx2.HTTPStatusError:
    request = httpx2.Request("POST", URL)
    if body is None:  # what the API server answers for a resource type it does not know
        response = httpx2.Response(code, text="404 page not found", request=request)
        return httpx2.HTTPStatusError("not found", request=request, response=response)
    return ApiError(request=request, response=httpx2.Response(code, json=body, request=request))


def test_an_unknown_torchjob_type_says_to_install_the_crd() -> None:
    err = explain(failed(404))
    assert err is not None and "CRD is not installed" in err.message and "torchjob install" in (err.fix or "")


def test_forbidden_names_the_server_s_reason_and_the_rbac_to_ask_for() -> None:
    reason = 'torchjobs.torchjob.dev is forbidden: User "ana" cannot create resource "torchjobs"'
    err = explain(failed(403, {"kind": "Status", "code": 403, "message": reason, "reason": "Forbidden"}))
    assert err is not None and reason in err.message and "RBAC" in (err.fix or "")


def test_a_bug_of_ours_is_not_dressed_up_as_the_user_s() -> None:
    assert explain(KeyError("metadata")) is None


def test_an_unreachable_cluster_is_an_error_message_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }))
    res = subprocess.run([sys.executable, "-m", "torchjob", "list", "--kube", "--kubeconfig", str(config)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "cannot reach the Kubernetes API server" in res.stderr and "fix:" in res.stderr
