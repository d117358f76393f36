"""A vulnerability audit of the installed set (the environment this Python runs in), what
scripts/test.sh runs: pip-audit (the `audit` extra), read as JSON.

Exit 1 when a package has a known vulnerability. When no advisory source answers (pip-audit asks
PyPI's per-version JSON API or OSV; a machine that reaches only a package index gets neither, and
pip-audit then prints "No known vulnerabilities found" for a set it never audited), it says so
plainly and exits 0: the declared floors, past the advisories known when they were set, are
checked by tests/test_dependencies.py either way. TORCHJOB_AUDIT_STRICT=1 makes an audit not done
fail too (for a machine that should reach a source).

    .venv/bin/python scripts/audit.py [--vulnerability-service osv|pypi]
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    strict = os.environ.get("TORCHJOB_AUDIT_STRICT") == "1"
    if importlib.util.find_spec("pip_audit") is None:
        print("audit: NOT DONE: pip-audit is not installed here (pip install -e '.[audit]')")
        return 1 if strict else 0
    done = subprocess.run([sys.executable, "-m", "pip_audit", "-f", "json", "--progress-spinner", "off", *argv],
                          capture_output=True, text=True, timeout=900)
    try:
        deps = json.loads(done.stdout)["dependencies"]
    except (ValueError, KeyError):
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"audit: NOT DONE: pip-audit could not ask an advisory source: {last}")
        return 1 if strict else 0
    vulnerable = [d for d in deps if d.get("vulns")]
    skipped = [d for d in deps if d.get("skip_reason")]
    for d in vulnerable:
        for v in d["vulns"]:
            fixed = ", ".join(v.get("fix_versions") or []) or "no fixed version"
            print(f"audit: {d['name']} {d.get('version')}: {v['id']} (fixed in {fixed})")
    if vulnerable:
        print(f"audit: {len(vulnerable)} of {len(deps)} installed packages have known vulnerabilities")
        return 1
    audited = len(deps) - len(skipped)
    if audited == 0:
        reason = skipped[0]["skip_reason"] if skipped else "nothing installed"
        print(f"audit: NOT DONE: no advisory source answered for any of the {len(deps)} installed packages "
              f"(e.g. {reason}); the floors in pyproject.toml are checked by tests/test_dependencies.py")
        return 1 if strict else 0
    note = f"; {len(skipped)} could not be audited: {', '.join(d['name'] for d in skipped)}" if skipped else ""
    print(f"audit: {audited} installed packages audited, no known vulnerability{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
