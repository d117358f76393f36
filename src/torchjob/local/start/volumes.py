"""Pod volumes on one machine: emptyDir and hostPath directories, configMaps from local files.

A volume mounted where its files already are needs nothing. Anywhere else (a script mounted at
`/workspace`, say) the replica starts in a private mount namespace with a bind mount there, so
the job runs unchanged and nothing outside the replica sees the mount (Linux only).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from torchjob.api.errors import UserError
from torchjob.api.model import Container, PodSpec, TorchJob
from torchjob.api.validate import local_path_problem
from torchjob.core.shape.topology import ReplicaId
from torchjob.local.start.launch import LocalOptions, Mount

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def _mount_point(job_dir: Path, rid: ReplicaId, kind: str, name: str) -> Path:
    return job_dir / "volumes" / (rid.name if kind == "emptyDir" else "shared") / kind / name


def mounts_for(
    job: TorchJob, rid: ReplicaId, pod: PodSpec, c: Container, opts: LocalOptions, job_dir: Path
) -> list[Mount]:
    volumes = {v.name: v for v in pod.volumes or []}
    out: list[Mount] = []
    for m in c.volumeMounts or []:
        vol = volumes[m.name]
        kind = vol.source_kind()
        if vol.emptyDir is not None:
            source = _mount_point(job_dir, rid, "emptyDir", vol.name)
        elif vol.hostPath is not None:
            source = Path(vol.hostPath.path)
        elif vol.configMap is not None:
            if vol.configMap.name not in opts.configmaps:
                raise UserError(
                    f"{rid.name}: volume {vol.name!r} is configMap {vol.configMap.name!r}, which exists only "
                    "on a cluster",
                    fix=f"pass --configmap {vol.configMap.name}=PATH (a file or a directory, as for "
                    "kubectl create configmap --from-file)",
                )
            source = _mount_point(job_dir, rid, "configMap", vol.configMap.name)
        elif vol.persistentVolumeClaim is not None:
            claim = str(vol.persistentVolumeClaim.get("claimName", ""))
            if claim not in opts.pvcs and any(c.name == claim for c in job.spec.volumeClaims or []):
                # a claim the job makes (a TrainJob's workspace): a directory of its own, shared by its processes
                source = _mount_point(job_dir, rid, "persistentVolumeClaim", claim)
            elif claim not in opts.pvcs:
                raise UserError(
                    f"{rid.name}: volume {vol.name!r} is persistentVolumeClaim {claim!r}, which exists only on a "
                    "cluster",
                    fix=f"pass --pvc {claim}=DIR to stand in a local directory for it",
                )
            else:
                source = Path(opts.pvcs[claim])
        else:
            raise UserError(
                f"{rid.name}: volume {vol.name!r} ({kind}) cannot be provided locally",
                fix="use emptyDir, hostPath, configMap (--configmap) or persistentVolumeClaim (--pvc) locally",
            )
        if m.subPath:
            source = inside(source, m.subPath, f"{rid.name}: volumeMounts {m.name!r} subPath")
        read_only = bool(m.readOnly) or vol.configMap is not None
        out.append(Mount(source=str(source), target=m.mountPath, read_only=read_only))
    return out


def inside(root: Path, rel: str, what: str) -> Path:
    """`root / rel`, refused unless it stays inside `root` (no absolute path, no '..', no symbolic
    link that leads out), as the kubelet checks a subPath: validate() says it first for a document."""
    problem = local_path_problem(rel)
    target = root / rel
    if problem is None:
        real_root = os.path.realpath(root)
        real = os.path.realpath(target)
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            problem = f"{rel!r} leads outside the volume (to {real})"
    if problem is not None:
        raise UserError(f"{what}: {problem}", fix="use a relative path inside the volume")
    return target


def fill_configmap(name: str, src: str, dest: Path, items: list[tuple[str, str]] | None) -> None:
    """Copy `--configmap NAME=PATH` into the volume's directory (keys are file names)."""
    p = Path(src)
    if not p.exists():
        raise UserError(f"--configmap {name}={src}: no such file or directory", fix="check the path")
    files = {p.name: p} if p.is_file() else {f.name: f for f in sorted(p.iterdir()) if f.is_file()}
    dest.mkdir(parents=True, exist_ok=True)
    pairs = items if items else [(k, k) for k in files]
    for key, rel in pairs:
        if key not in files:
            raise UserError(f"configMap {name!r} has no key {key!r}", fix=f"its keys are {sorted(files)}")
        target = inside(dest, rel, f"configMap {name!r} item {key!r} path")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files[key], target)


def prepare(job: TorchJob, job_dir: Path, configmaps: dict[str, str], mounts: list[Mount]) -> list[Path]:
    """Create volume directories and missing mount points; returns the mount points it created
    (removed again when the job ends)."""
    for spec in job.spec.pytorchReplicaSpecs.values():
        for vol in spec.template.spec.volumes or []:
            if vol.configMap is not None and vol.configMap.name in configmaps:
                items = [(i.key, i.path) for i in vol.configMap.items] if vol.configMap.items else None
                dest = job_dir / "volumes" / "shared" / "configMap" / vol.configMap.name
                if not dest.exists():
                    fill_configmap(vol.configMap.name, configmaps[vol.configMap.name], dest, items)
            if vol.hostPath is not None and vol.hostPath.type in ("DirectoryOrCreate",):
                Path(vol.hostPath.path).mkdir(parents=True, exist_ok=True)
    created: list[Path] = []
    for m in mounts:
        src = Path(m.source)
        if "/volumes/" in m.source and not src.exists():
            src.mkdir(parents=True, exist_ok=True)
        if not src.exists():
            raise UserError(f"volume source {m.source} does not exist", fix="create it, or fix hostPath.path")
        target = Path(m.target)
        if needs_namespace(m) and not target.exists():
            try:
                if src.is_dir():
                    target.mkdir(parents=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
            except OSError as e:
                raise UserError(
                    f"mountPath {m.target} does not exist and cannot be created: {e.strerror}",
                    fix=f"create {m.target} (it stays empty outside the job), or run torchjob as root",
                )
            created.append(target)
    return created


def needs_namespace(m: Mount) -> bool:
    try:
        return os.path.realpath(m.source) != os.path.realpath(m.target) or m.read_only
    except OSError:
        return True


def preexec(mounts: list[Mount], cwd: str) -> Callable[[], None] | None:
    """A function for Popen's preexec_fn that enters a private mount namespace, bind-mounts the
    volumes and changes into cwd (after mounting, so a cwd inside a mount works)."""
    todo = [m for m in mounts if needs_namespace(m)]
    if not todo:
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    uid, gid = os.getuid(), os.getgid()

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def enter() -> None:
        if uid == 0:
            check(libc.unshare(CLONE_NEWNS), "unshare(mount namespace)")
        else:
            check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user+mount namespace)")
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        for m in todo:
            src, dst = m.source.encode(), m.target.encode()
            check(libc.mount(src, dst, None, MS_BIND | MS_REC, None), f"bind {m.source} on {m.target}")
            if m.read_only:
                check(libc.mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None), f"read-only {m.target}")
        os.chdir(cwd)

    return enter
