"""Smoke test for scripts/dev-cluster.sh (stdlib only).

Checks: the API answers with TLS verified against the kubeconfig's CA; the fake nodes are Ready;
a CRD is established and a custom object (with its status subresource) works; kube-scheduler
binds a Pod that tolerates the kwok taint to a KWOK node and KWOK makes it Running; a Pod without
the toleration stays Pending; KWOK completes pod deletion. Cleans up after itself.

    eval "$(scripts/dev-cluster.sh up | tail -n1)" && python3 hack/controlplane/smoke.py
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

with open(os.environ["KUBECONFIG"]) as f:
    kc = f.read()
server = re.search(r"server: (\S+)", kc).group(1)  # type: ignore[union-attr]
token = re.search(r"token: (\S+)", kc).group(1)  # type: ignore[union-attr]
ca = base64.b64decode(re.search(r"certificate-authority-data: (\S+)", kc).group(1))  # type: ignore[union-attr]
ctx = ssl.create_default_context(cadata=ca.decode())


def api(method: str, path: str, body: Any = None, ctype: str = "application/json", ok404: bool = False) -> Any:
    req = urllib.request.Request(
        server + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": ctype, "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        if ok404 and e.code == 404:
            return None
        raise SystemExit(f"{method} {path}: {e.code} {e.read().decode()[:500]}") from None


def wait(what: str, cond: Any, timeout: float = 30) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


t = time.monotonic()
print("version:", api("GET", "/version")["gitVersion"])
print("namespaces:", [n["metadata"]["name"] for n in api("GET", "/api/v1/namespaces")["items"]])
nodes = api("GET", "/api/v1/nodes")["items"]
assert nodes, "no nodes"
for n in nodes:
    ready = next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
    print("node:", n["metadata"]["name"], "Ready=" + ready, n["status"]["allocatable"], n["spec"].get("taints"))
    assert ready == "True"

CRD = "widgets.smoke.torchjob.dev"
api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": CRD},
    "spec": {
        "group": "smoke.torchjob.dev", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
})


def established() -> bool:
    c = api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
    conds = (c.get("status") or {}).get("conditions") or []
    return any(x["type"] == "Established" and x["status"] == "True" for x in conds)


wait("the CRD to be established", established)
W = "/apis/smoke.torchjob.dev/v1/namespaces/default/widgets"
api("POST", W, {"apiVersion": "smoke.torchjob.dev/v1", "kind": "Widget", "metadata": {"name": "w1"},
                "spec": {"size": 3}})
w = api("PATCH", W + "/w1/status", {"status": {"phase": "Done"}}, ctype="application/merge-patch+json")
print("widget:", w["metadata"]["name"], w["spec"], w["status"])
assert w["status"] == {"phase": "Done"}

P = "/api/v1/namespaces/default/pods"
pod = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke-p1"},
    "spec": {
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
api("POST", P, pod)
t0 = time.monotonic()
p = wait("smoke-p1 Running", lambda: (q := api("GET", P + "/smoke-p1"))["status"].get("phase") == "Running" and q)
print("pod:", p["spec"]["nodeName"], p["status"]["phase"], "podIP", p["status"].get("podIP"),
      f"Running after {time.monotonic() - t0:.1f}s")
tainted = any(t.get("key") == "kwok.x-k8s.io/node" for t in nodes[0]["spec"].get("taints") or [])
if tainted:
    api("POST", P, {**pod, "metadata": {"name": "smoke-p2"}, "spec": {**pod["spec"], "tolerations": []}})
    time.sleep(2)
    p2 = api("GET", P + "/smoke-p2")
    print("pod without toleration:", p2["status"].get("phase"),
          [c.get("message") for c in p2["status"].get("conditions", [])])
    assert p2["status"].get("phase") == "Pending" and not p2["spec"].get("nodeName")
    api("DELETE", P + "/smoke-p2")
api("DELETE", P + "/smoke-p1")
wait("smoke-p1 to be deleted (kwok pod-delete stage)", lambda: api("GET", P + "/smoke-p1", ok404=True) is None)
wait("smoke-p2 to be deleted", lambda: api("GET", P + "/smoke-p2", ok404=True) is None)
api("DELETE", W + "/w1")
api("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
print(f"smoke OK in {time.monotonic() - t:.1f}s")
