"""The programs torchjob ships into pods through one ConfigMap per job namespace (CONFIGMAP:
kube/objects/front/inplace.py `programs`: the in-place entry point, its spare launcher, the stacks' front of
kube/objects/front/stacks.py), and the stub a pod's command carries instead of their source: `boot`, which runs one
only if its SHA-256 is the one in the pod's spec. Pure."""

from __future__ import annotations

CONFIGMAP = "torchjob-inplace"  # its name since it carried the in-place programs alone (the operator's RBAC names it)

BOOT_HEAD = "import hashlib, os, sys\n"


def boot(sha256: str, path: str, *, head: str = "", who: str = "torchjob-inplace",
         what: str = "the entry point", without: str = "restarts in place",
         drop: tuple[str, ...] = ("TORCHJOB_INPLACE_", "TORCHJOB_SPARE_AFTER_S")) -> str:
    """What the container's interpreter runs first (`python -I -c BOOT ARGV...`): the program at `path`, read
    once and run only if its SHA-256 is the one the pod's spec carries (whoever may write the ConfigMap
    is not to run code in the pod); else the command alone, as it would run without the program (its
    variables, those named by a prefix in `drop`, taken out), `who` saying so. `head`: how the stub begins
    (how a pod made with it is known: kube/objects/front/stacks.py's HEAD); the in-place entry point's is BOOT_HEAD.
    The defaults are the in-place entry point's (kube/objects/front/inplace.py)."""
    return (head + BOOT_HEAD + f"p = {path!r}\n"
            "try:\n    b = open(p, 'rb').read()\nexcept OSError:\n    b = b''\n"
            f"if hashlib.sha256(b).hexdigest() != {sha256!r}:\n"
            f"    sys.stderr.write(f'{who}: {{p}} is not {what} this pod was made with: '\n"
            f"                     'running the command without {without}\\n')\n"
            f"    env = {{k: v for k, v in os.environ.items() if not k.startswith({drop!r})}}\n"
            "    try:\n        os.execvpe(sys.argv[1], sys.argv[1:], env)\n"
            "    except OSError as e:\n"
            f"        sys.stderr.write(f'{who}: cannot start {{sys.argv[1]}}: {{e.strerror or e}}\\n')\n"
            "        sys.exit(127)\n"
            "sys.argv[0] = p\n"
            "main = sys.modules['__main__'].__dict__\n"
            "main['__file__'] = p\n"
            "exec(compile(b, p, 'exec'), main)\n")
