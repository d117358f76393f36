"""A TorchJob from what a torchrun or TorchX user types: `-j NxM` (or `MIN:MAXxM`), a script, a module
or a command, a name, an image, env. Pure (no process, no cluster): the command line and the Python API
both build their jobs here (`build`: the job and the files it ships, every mistake refused in one
place), and print or return the document, so that a user can keep it as YAML.

The shape follows torchrun and TorchX: N replicas of M processes each, through torchrun. The first
replica is the Master, the others Workers (Kubeflow's layout). `-j MIN:MAXxM` is elastic, as TorchX
writes it: MAX Worker replicas, no Master, and torchrun's c10d rendezvous on the first of them.

Code that must reach a cluster's pods travels in a ConfigMap made for the job (`CodeVolume`), mounted
read-only at `CODE_DIR`, which is the container's working directory. A ConfigMap holds at most
`CODE_LIMIT` bytes (the API server refuses a larger one), so a larger script or directory is refused
before anything is created (`torchjob.api.shipping` picks a directory's files).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torchjob.api.errors import UserError
from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION, KIND, TorchJob
from torchjob.api.shipping import check_size, read, select_code

CODE_DIR = "/opt/torchjob/code"
CODE_VOLUME = "torchjob-code"
SHAPE = re.compile(r"^(?:(\d+):)?(\d+)x(\d+)$")


@dataclass(frozen=True)
class Shape:
    """How many replicas (nodes) and processes per replica: `-j NxM`, or elastic `-j MIN:MAXxM`."""

    nnodes: int = 1
    nproc_per_node: int = 1
    min_nodes: int | None = None  # set: elastic between min_nodes and nnodes

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None


def parse_shape(j: str | None = None, nnodes: str | int | None = None, nproc_per_node: int | None = None,
                flag: str = "-j", names: tuple[str, str] = ("--nnodes", "--nproc-per-node")) -> Shape:
    """`-j NxM`, `-j MIN:MAXxM`, or `--nnodes N|MIN:MAX` with `--nproc-per-node M`; raises UserError
    naming the flag, the reason and the fix."""
    if j is not None:
        if nnodes is not None or nproc_per_node is not None:
            raise UserError(f"{flag} {j!r} and --nnodes/--nproc-per-node say the same thing twice",
                            fix=f"pass either {flag} NxM or --nnodes N --nproc-per-node M")
        m = SHAPE.match(j.strip())
        if m is None:
            raise UserError(f"{flag} {j!r} is not NxM or MIN:MAXxM (N replicas of M processes each)",
                            fix=f"e.g. {flag} 2x4 (2 replicas of 4 processes), or {flag} 1:4x8 (elastic)")
        lo, hi, procs = m.group(1), int(m.group(2)), int(m.group(3))
        return _checked(flag, j, int(lo) if lo is not None else None, hi, procs)
    text = str(nnodes if nnodes is not None else 1)
    lo_s, sep, hi_s = text.partition(":")
    if not (lo_s.isdigit() and (not sep or hi_s.isdigit())):
        raise UserError(f"{names[0]} {text!r} is not N or MIN:MAX", fix=f"e.g. {names[0]} 2, or 1:4 (elastic)")
    procs = 1 if nproc_per_node is None else nproc_per_node
    if isinstance(procs, bool) or not isinstance(procs, int):
        raise UserError(f"{names[1]} {procs!r} is not a number of processes", fix=f"e.g. {names[1]} 4")
    return _checked(f"{names[0]}/{names[1]}", text, int(lo_s) if sep else None, int(hi_s if sep else lo_s),
                    procs)


def _checked(flag: str, given: str, lo: int | None, hi: int, procs: int) -> Shape:
    if hi < 1 or procs < 1:
        raise UserError(f"{flag} {given!r} asks for {hi} replica(s) of {procs} process(es); a job needs at least "
                        "one of each", fix=f"e.g. {flag} 1x1" if flag == "-j" else "pass 1 or more")
    if lo is not None and not 1 <= lo <= hi:
        raise UserError(f"{flag} {given!r}: the elastic minimum {lo} must be between 1 and the maximum {hi}",
                        fix="e.g. -j 1:4x2")
    return Shape(hi, procs, lo)


@dataclass(frozen=True)
class Entry:
    """What each process runs: a script (a file, or a directory with `__main__.py`, as `python DIR`
    runs it), a module (`-m`), or a command; with its arguments."""

    script: str | None = None
    module: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    def argv(self, script_as: str | None = None) -> list[str]:
        """torchrun's argv; `script_as`: the script's path where the replicas see it."""
        if self.script is not None:
            return ["torchrun", script_as or self.script, *self.args]
        if self.module is not None:
            return ["torchrun", "-m", self.module, *self.args]
        if not self.command:
            raise UserError("nothing to run", fix="name a script, -m MODULE, or a command after --")
        if self.command[0] == "torchrun":  # already torchrun: as it is
            return [*self.command, *self.args]
        return ["torchrun", "--no-python", *self.command, *self.args]


@dataclass(frozen=True)
class CodeVolume:
    """Files shipped to the replicas in a ConfigMap: key -> path under CODE_DIR."""

    configmap: str
    items: tuple[tuple[str, str], ...]
    script: str = "."  # the script's path under CODE_DIR ("." : the directory itself, run as `python DIR`)


def code_volume(job_name: str, paths: Sequence[str], script: str = ".") -> CodeVolume:
    """The ConfigMap's name and keys (a key may hold no `/`: each file gets one, mapped to its path)."""
    keys: dict[str, str] = {}
    for rel in paths:
        key = re.sub(r"[^-._a-zA-Z0-9]", "_", rel.replace("/", "."))
        while key in keys or key in (".", ".."):
            key = f"_{key}"
        keys[key] = rel
    return CodeVolume(f"{job_name}-code", tuple(keys.items()), script)


def default_name(entry: Entry) -> str:
    """`<script or module stem>-<5 random hex>`, like TorchX's app ids: two runs never collide."""
    stem = Path(entry.script.rstrip("/")).stem if entry.script else (entry.module or (entry.command or ("job",))[0])
    stem = re.sub(r"[^a-z0-9-]+", "-", Path(stem).name.lower()).strip("-")[:40].strip("-") or "job"
    if not stem[0].isalpha():
        stem = f"job-{stem}"
    return f"{stem}-{secrets.token_hex(3)[:5]}"


@dataclass(frozen=True)
class JobSpec:
    """Everything a job built without a document is made of."""

    entry: Entry
    shape: Shape = Shape()
    name: str | None = None
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None  # locally: where the script's relative path is read from
    code: CodeVolume | None = None  # on a cluster: the ConfigMap that carries the code
    # a directory shipped to a cluster: its dotfiles and ignored files (.gitignore) that these patterns
    # (gitignore syntax, relative to the directory) name go too
    include: tuple[str, ...] = ()


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in pairs:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UserError(f"--env {item!r} is not K=V", fix="e.g. --env NCCL_DEBUG=INFO")
        out[k] = v
    return out


def build_job(spec: JobSpec) -> TorchJob:
    """The TorchJob: validated and defaulted as a document would be (its errors name its fields)."""
    entry, shape = spec.entry, spec.shape
    name = spec.name or default_name(entry)
    script_as = None
    if spec.code is not None:
        script_as = CODE_DIR if spec.code.script == "." else f"{CODE_DIR}/{spec.code.script}"
    container: dict[str, Any] = {"name": "pytorch", "command": entry.argv(script_as)}
    if spec.image:
        container["image"] = spec.image
    if spec.env:
        container["env"] = [{"name": k, "value": v} for k, v in spec.env.items()]
    pod: dict[str, Any] = {"containers": [container]}
    if spec.code is not None:
        container["workingDir"] = CODE_DIR
        container["volumeMounts"] = [{"name": CODE_VOLUME, "mountPath": CODE_DIR, "readOnly": True}]
        pod["volumes"] = [{"name": CODE_VOLUME, "configMap": {
            "name": spec.code.configmap, "items": [{"key": k, "path": p} for k, p in spec.code.items]}}]
    elif spec.working_dir:
        container["workingDir"] = spec.working_dir

    def replicas(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "Never" if not shape.elastic else "OnFailure",
                "template": {"spec": pod}}

    specs: dict[str, Any] = {}
    body: dict[str, Any] = {"pytorchReplicaSpecs": specs, "nprocPerNode": str(shape.nproc_per_node)}
    if shape.elastic:
        specs["Worker"] = replicas(shape.nnodes)
        body["elasticPolicy"] = {"minReplicas": shape.min_nodes, "maxReplicas": shape.nnodes,
                                 "rdzvBackend": "c10d", "maxRestarts": 3}
    else:
        specs["Master"] = replicas(1)
        if shape.nnodes > 1:
            specs["Worker"] = replicas(shape.nnodes - 1)
    data = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": body}
    return job_from_data(data)


@dataclass(frozen=True)
class Words:
    """How a face names what it was given, in its refusals: flags on the command line, arguments
    in Python. What is refused, and why, is the same."""

    need_image: str  # the start of the refusal of a cluster job without an image
    image_example: str  # how to pass one ({} is the image)
    other_entries: str  # what to run instead of a script


FLAGS = Words("--kube needs --image", "--image {}", "pass -m MODULE or -- COMMAND")
ARGUMENTS = Words("a cluster needs an image", 'image="{}"', "use Job.from_module or Job.from_command")
EXAMPLE_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"


@dataclass(frozen=True)
class Built:
    """A job and the files it ships (relative path -> content; None: it runs from what is there).
    A runtime places the files: locally in the directory the job runs in, on a cluster in the
    ConfigMap the job's `torchjob-code` volume names (`CodeVolume` says which key is which file)."""

    job: TorchJob
    code: dict[str, bytes] | None = None
    left_out: tuple[str, ...] = ()  # a shipped directory's files that stay here, with why (`.env (a dotfile)`)

    def shipped(self) -> str | None:
        """What goes to the cluster and what stays, in words (None: nothing ships)."""
        if self.code is None:
            return None
        names = ", ".join(sorted(self.code))
        out = (f"the code ({len(self.code)} file(s), {sum(map(len, self.code.values())):,} bytes) goes in ConfigMap "
               f"{self.job.name}-code: {names}")
        if self.left_out:
            out += f"; left out: {', '.join(self.left_out)} (--include PATTERN ships them)"
        return out


def check_script(script: str, words: Words = FLAGS) -> Path:
    """A script is a file, or a directory that `python DIR` runs (one with `__main__.py`)."""
    path = Path(script)
    if not path.exists():
        raise UserError(f"script {script!r} does not exist",
                        fix=f"check the path (relative to this directory), or {words.other_entries}")
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise UserError(f"script {script!r} is a directory without __main__.py",
                        fix="name the script in it, or add __main__.py (python DIR runs it)")
    return path


def build(spec: JobSpec, *, kube: bool = False, files: Mapping[str, bytes] | None = None,
          words: Words = FLAGS) -> Built:
    """The job `spec` describes, to run on a cluster (`kube`) or here, and the files it ships.

    `files` are those the entry runs from (a function's shipment, its runner the entry script);
    without them a script runs from disk where it is, and on a cluster travels itself (a directory
    whole). Every mistake is refused here, before anything starts; the name is drawn once."""
    if kube and not spec.image:
        raise UserError(f"{words.need_image}: the image every replica runs (with python and torch in it)",
                        fix=f"e.g. {words.image_example.format(EXAMPLE_IMAGE)} (python and torch in it)")
    script = None
    if spec.entry.script is not None and files is None:
        script = check_script(spec.entry.script, words)
    spec = replace(spec, name=spec.name or default_name(spec.entry))
    assert spec.name is not None
    left_out: tuple[str, ...] = ()
    if files is None and kube and script is not None:
        chosen = select_code(script, include=spec.include)
        files, left_out = read(script, chosen, str(script)), chosen.left_out
    if files is None:
        return Built(build_job(spec))
    check_size(files, f"the code of job {spec.name}")
    if not kube:  # the runtime writes them where the job runs: no working directory of its own
        return Built(build_job(replace(spec, working_dir=None)), dict(files))
    # the entry's path among the files: a shipped file, the script's own name, or a directory ("." runs it)
    entry_as = (spec.entry.script or ".") if script is None else ("." if script.is_dir() else script.name)
    code = code_volume(spec.name, list(files), entry_as)
    return Built(build_job(replace(spec, working_dir=None, code=code)), dict(files), left_out)
