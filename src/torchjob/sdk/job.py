"""`torchjob.Job`: a job built from a function, a script, a module, a command or a document, run on
this machine or submitted to a cluster with the same calls."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from torchjob.api.build import ARGUMENTS, Built, JobSpec, build, default_name, parse_shape
from torchjob.api.build import Entry as _Entry
from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.connect import Target, connect
from torchjob.runtime import created
from torchjob.sdk.result import JobHandle, JobResult, result_of
from torchjob.sdk.ship import RUNNER, nonce_of, shipment

_NAMES = ("nnodes", "nproc_per_node")


def _spec(entry: _Entry, nnodes: int | str, nproc_per_node: int, name: str | None, image: str | None,
          env: Mapping[str, str] | None, files: Mapping[str, bytes] | None = None) -> JobSpec:
    if isinstance(nnodes, bool) or not isinstance(nnodes, int | str):
        raise UserError(f"nnodes {nnodes!r} is not a number of replicas", fix='e.g. nnodes=2, or nnodes="1:4"')
    shape = parse_shape(None, nnodes, nproc_per_node, names=_NAMES)
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise UserError(f"env {k!r}: {v!r} is not a name and a string value", fix='e.g. env={"NCCL_DEBUG": "INFO"}')
    spec = JobSpec(entry, shape, name, image, dict(env or {}), working_dir=os.getcwd())
    # every mistake now, before anything runs; the name drawn once: local and kube runs share it
    return replace(spec, name=build(spec, files=files, words=ARGUMENTS).job.name)


class Job:
    """A distributed PyTorch job: N replicas (the first is the master) of M processes each, through
    torchrun, run on this machine (`run`, `submit`) or on Kubernetes (`submit(kube=True)`).

    Build one with `Job.from_function`, `Job.from_script`, `Job.from_module`, `Job.from_command` or
    `Job.from_file`; `to_yaml()` gives the TorchJob document, to keep.

    Example:
        >>> import torchjob
        >>> def train(steps):
        ...     import torch.distributed as dist
        ...     dist.init_process_group("gloo")
        ...     return {"world": dist.get_world_size(), "steps": steps}
        >>> result = torchjob.Job.from_function(train, args=(10,), nnodes=2, nproc_per_node=2).run()
        >>> result.value
        {'world': 4, 'steps': 10}
    """

    def __init__(self, spec: JobSpec | None = None, *, document: TorchJob | None = None,
                 files: Mapping[str, bytes] | None = None) -> None:
        """Use the `from_*` constructors."""
        if (spec is None) == (document is None):
            raise TypeError("Job() takes a JobSpec or a document: use Job.from_function, from_script or from_file")
        self._document = document
        self._files = dict(files) if files is not None else None  # a function's shipment
        self._nonce = nonce_of(self._files) if self._files is not None else None  # its value's line carries it
        if spec is not None and spec.name is None:
            spec = replace(spec, name=build(spec, files=self._files, words=ARGUMENTS).job.name)
        self._spec = spec
        self.name: str = document.name if document is not None else spec.name if spec and spec.name else ""

    # --- building ---

    @classmethod
    def from_function(cls, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                      *, nnodes: int | str = 1, nproc_per_node: int = 1, name: str | None = None,
                      image: str | None = None, env: Mapping[str, str] | None = None) -> Job:
        """A job that calls `fn(*args, **kwargs)` in every process; `JobResult.value` is what it returned
        on rank 0.

        The function travels as its source with its arguments as JSON (the replicas may be pods on
        another machine): define it with `def` at the top level of a module or a notebook cell, and
        import what it needs inside it (modules, functions of installed packages and plain constants it
        uses from its module travel too). A lambda, a closure, a nested function, a builtin, or one
        whose source cannot be read raises `UnshippableFunction` naming why; an argument that is not
        JSON raises `UserError`. Its return value must be JSON too (numbers, strings, lists, dicts),
        else the job fails with `UnreturnableValue`.

        Args:
            fn: the function.
            args: its positional arguments (JSON values).
            kwargs: its keyword arguments (JSON values).
            nnodes: replicas (nodes); "MIN:MAX" is elastic.
            nproc_per_node: processes per replica (torchrun's --nproc-per-node).
            name: the job's name (default: the function's, with a random suffix).
            image: the container image (required with `submit(kube=True)`; python, and torch if the
                function uses it).
            env: variables set in every process.

        Example:
            >>> def add(a, b):
            ...     return a + b
            >>> torchjob.Job.from_function(add, args=(1, 2)).run().value
            3
        """
        files = shipment(fn, args, kwargs)
        name = name or default_name(_Entry(script=getattr(fn, "__name__", "function")))
        return cls(_spec(_Entry(script=RUNNER), nnodes, nproc_per_node, name, image, env, files), files=files)

    @classmethod
    def from_script(cls, path: str | os.PathLike[str], args: Sequence[str] = (), *, nnodes: int | str = 1,
                    nproc_per_node: int = 1, name: str | None = None, image: str | None = None,
                    env: Mapping[str, str] | None = None, include: Sequence[str] = ()) -> Job:
        """A job that runs a script (a file, or a directory with `__main__.py`) in every process,
        as `torchjob run -j NxM SCRIPT -- ARGS` does. Locally the file on disk runs; with
        `submit(kube=True)` it (or the directory) travels in a ConfigMap made for the job: a directory
        without its dotfiles and what its `.gitignore` ignores, but those `include` names (patterns in
        gitignore syntax, relative to the directory, as `--include`); a link out of it is refused.

        Example:
            >>> torchjob.Job.from_script("train.py", ["--epochs", "3"], nnodes=2, nproc_per_node=4).run()
        """
        if isinstance(include, str) or not all(isinstance(p, str) for p in include):
            raise UserError(f"include {include!r} is not a list of patterns",
                            fix='e.g. include=[".env", "data/*.json"]')
        entry = _Entry(script=str(path), args=tuple(str(a) for a in args))
        return cls(replace(_spec(entry, nnodes, nproc_per_node, name, image, env), include=tuple(include)))

    @classmethod
    def from_module(cls, module: str, args: Sequence[str] = (), *, nnodes: int | str = 1, nproc_per_node: int = 1,
                    name: str | None = None, image: str | None = None, env: Mapping[str, str] | None = None) -> Job:
        """A job that runs `python -m MODULE ARGS` in every process (the module must be importable there)."""
        entry = _Entry(module=module, args=tuple(str(a) for a in args))
        return cls(_spec(entry, nnodes, nproc_per_node, name, image, env))

    @classmethod
    def from_command(cls, command: Sequence[str], *, nnodes: int | str = 1, nproc_per_node: int = 1,
                     name: str | None = None, image: str | None = None, env: Mapping[str, str] | None = None) -> Job:
        """A job that runs a command in every process (torchrun --no-python), e.g. `["bash", "run.sh"]`."""
        return cls(_spec(_Entry(command=tuple(command)), nnodes, nproc_per_node, name, image, env))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Job:
        """A job from a document in any dialect torchjob reads (TorchJob, Kubeflow PyTorchJob, Trainer's
        TrainJob, Volcano Job, T9k PyTorchTrainingJob). Raises `UserError` (an `InvalidJob` naming each
        problem with its line) when it is not a valid job."""
        from torchjob.dialects.load import load

        return cls(document=load(Path(path)).job)

    # --- the document ---

    def to_torchjob(self, *, kube: bool = False) -> TorchJob:
        """The TorchJob this job runs as; `kube=True`: as it is submitted to a cluster (its code in a
        ConfigMap). Raises `UserError` for what only a cluster needs (an image, code over 1 MiB)."""
        return self._built(kube).job

    def _built(self, kube: bool) -> Built:
        """The job and the files it ships (`torchjob.api.build`: the command line's builder too)."""
        if self._document is not None:
            return Built(self._document)
        assert self._spec is not None
        return build(self._spec, kube=kube, files=self._files, words=ARGUMENTS)

    def to_dict(self, *, kube: bool = False) -> dict[str, Any]:
        """The TorchJob document as plain data."""
        from torchjob.dialects.convert import explicit

        return explicit(self.to_torchjob(kube=kube))

    def to_yaml(self, *, kube: bool = False) -> str:
        """The TorchJob document as YAML (`torchjob run job.yaml` runs it; with `kube=True`, as submitted to a
        cluster, where its code's ConfigMap is made with it).

        Example:
            >>> print(torchjob.Job.from_script("train.py", nnodes=2).to_yaml())
        """
        import yaml

        return str(yaml.safe_dump(self.to_dict(kube=kube), sort_keys=False))

    def __repr__(self) -> str:
        return f"<Job {self.name}>"

    # --- running ---

    def run(self, *, quiet: bool = False, check: bool = True) -> JobResult:
        """Run the job on this machine in the foreground: blocks until it ends, streaming the replicas'
        output (prefixed `[worker-1] ...`) and its progress. Returns the result; a job that failed raises
        `JobFailed` carrying its root cause (`check=False`: return the failed result instead).

        Example:
            >>> result = job.run()
            >>> result.ok, result.value
        """
        __tracebackhide__ = True  # IPython: the error is the job's, not these frames'
        from torchjob.sdk.local import console_here, local_runtime

        built = self._built(False)
        rt = local_runtime()
        console = console_here(quiet)
        view = rt.run(rt.dryrun(built.job, code=built.code), quiet, console)
        result = result_of(view, rt, self._nonce)
        # in a notebook cell the replica's traceback was just streamed: the error says where, not again
        return result.check(shown=console is not None and not quiet) if check else result

    def submit(self, *, kube: bool = False, namespace: str | None = None, kubeconfig: str | None = None,
               context: str | None = None) -> JobHandle:
        """Start the job detached and return its handle: on this machine (a supervisor that outlives this
        process), or with `kube=True` on the cluster of your kubeconfig (the operator runs it). On this
        machine it returns once the supervisor has taken the job (`handle.state` is `Created` or later);
        on a cluster once the API server has it (`Pending` until the operator takes it).

        Example:
            >>> handle = job.submit(kube=True, namespace="team-a")
            >>> handle.wait(timeout=3600).ok
        """
        from torchjob.sdk.local import local_runtime

        built = self._built(kube)
        if kube and self._files is None and built.shipped():  # a script's files: say which go, as the CLI does
            print(f"torchjob: {built.shipped()}", file=sys.stderr, flush=True)
        target = Target(True, kubeconfig, context, namespace) if kube else None
        rt = connect(target) if target is not None else local_runtime()
        plan = rt.dryrun(built.job, code=built.code)
        for warning in plan.warnings:  # what the runtime does not do of what the job asks, as the CLI says it
            print(f"torchjob: warning: {warning}", file=sys.stderr, flush=True)
        rt.schedule(plan)
        view = rt.describe(f"torchjob/{self.name}" if kube else self.name)
        if target is None:
            _reap(view.supervisor)
            view = created(rt, view)
        return JobHandle(self.name, rt, kube=kube, namespace=view.namespace, nonce=self._nonce, kind="TorchJob")


def _reap(pid: int | None) -> None:
    """The detached supervisor is this process's child (unlike `torchjob submit`'s, which exits at once):
    wait for it in the background, so that once it ends it is gone, not a zombie that looks alive."""
    import threading

    if pid:
        threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True, name=f"reap-{pid}").start()
