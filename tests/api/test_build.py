"""Building a job from torchrun-style input (`torchjob.api.build`, pure): the shape, the entry, the
code's ConfigMap volume, what a directory ships (`torchjob.api.shipping`) and its size limit."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from torchjob.api.build import (
    ARGUMENTS,
    CODE_DIR,
    FLAGS,
    Entry,
    JobSpec,
    Shape,
    build,
    build_job,
    code_volume,
    default_name,
    parse_shape,
)
from torchjob.api.errors import UserError
from torchjob.api.shipping import CODE_LIMIT, CODE_MARGIN, collect, select
from torchjob.core.shape.topology import elastic_bounds, replicas


@pytest.mark.parametrize("j,shape", [("1x1", Shape(1, 1)), ("2x4", Shape(2, 4)), ("1:4x8", Shape(4, 8, 1)),
                                     ("3:3x1", Shape(3, 1, 3)), (" 2x2 ", Shape(2, 2))])
def test_j_is_read_as_torchx_writes_it(j: str, shape: Shape) -> None:
    assert parse_shape(j) == shape


@pytest.mark.parametrize("j,words", [("0x2", "at least one"), ("2x0", "at least one"), ("2x", "is not NxM"),
                                     ("x2", "is not NxM"), ("2", "is not NxM"), ("3:2x1", "between 1 and"),
                                     ("0:2x1", "between 1 and"), ("axb", "is not NxM")])
def test_a_bad_j_names_the_flag_and_a_fix(j: str, words: str) -> None:
    with pytest.raises(UserError) as e:
        parse_shape(j)
    assert words in e.value.message and "-j" in e.value.message and e.value.fix


def test_nnodes_and_nproc_per_node_are_the_long_form() -> None:
    assert parse_shape(None, "2", 3) == Shape(2, 3)
    assert parse_shape(None, "1:3", 2) == Shape(3, 2, 1)
    with pytest.raises(UserError, match="say the same thing twice"):
        parse_shape("2x2", "2", None)
    with pytest.raises(UserError, match="nnodes"):
        parse_shape(None, "two", 1, names=("nnodes", "nproc_per_node"))


def test_the_first_replica_is_the_master_and_torchrun_runs_m_processes() -> None:
    job = build_job(JobSpec(Entry(script="train.py", args=("--lr", "0.1")), Shape(3, 4), name="t",
                            env={"A": "b"}, image="img", working_dir="/w"))
    assert [r.name for r in replicas(job)] == ["master-0", "worker-0", "worker-1"]
    c = job.spec.pytorchReplicaSpecs["Master"].template.spec.containers[0]
    assert c.command == ["torchrun", "train.py", "--lr", "0.1"] and c.image == "img" and c.workingDir == "/w"
    assert [(e.name, e.value) for e in c.env or []] == [("A", "b")]
    assert job.spec.nprocPerNode == "4" and job.spec.elasticPolicy is None


def test_elastic_is_workers_only_with_a_c10d_rendezvous() -> None:
    job = build_job(JobSpec(Entry(module="pkg.train"), Shape(4, 2, 1), name="el"))
    assert set(job.spec.pytorchReplicaSpecs) == {"Worker"} and job.replica_count("Worker") == 4
    assert elastic_bounds(job) == (1, 4)
    c = job.spec.pytorchReplicaSpecs["Worker"].template.spec.containers[0]
    assert c.command == ["torchrun", "-m", "pkg.train"]


def test_a_command_runs_through_torchrun_without_python() -> None:
    assert Entry(command=("bash", "run.sh")).argv() == ["torchrun", "--no-python", "bash", "run.sh"]
    assert Entry(command=("torchrun", "x.py")).argv() == ["torchrun", "x.py"]


def test_code_travels_in_a_configmap_mounted_as_the_working_directory() -> None:
    code = code_volume("j", ["train.py", "pkg/model.py", "pkg.model.py"], "train.py")
    assert code.configmap == "j-code"
    keys = [k for k, _ in code.items]
    assert len(set(keys)) == 3 and all("/" not in k for k in keys)
    job = build_job(JobSpec(Entry(script="train.py"), Shape(1, 2), name="j", image="img", code=code))
    pod = job.spec.pytorchReplicaSpecs["Master"].template.spec
    c = pod.containers[0]
    assert c.command == ["torchrun", f"{CODE_DIR}/train.py"] and c.workingDir == CODE_DIR
    assert pod.volumes[0].configMap.name == "j-code"
    assert [(i.key, i.path) for i in pod.volumes[0].configMap.items] == list(code.items)


def test_collect_skips_caches_and_refuses_past_the_configmap_limit(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "__main__.py").write_text("print(1)\n")
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert set(collect(tmp_path)) == {"__main__.py", "pkg/m.py"}
    (tmp_path / "big.bin").write_bytes(b"\0" * (CODE_LIMIT - CODE_MARGIN))
    with pytest.raises(UserError, match="at most") as e:
        collect(tmp_path)
    assert "1 MiB" in e.value.message and e.value.fix
    with pytest.raises(UserError, match="does not exist"):
        collect(tmp_path / "nope.py")


def test_default_names_are_dns_labels_that_differ() -> None:
    a, b = default_name(Entry(script="My_Train.py")), default_name(Entry(script="My_Train.py"))
    assert a != b and a.startswith("my-train-")
    assert default_name(Entry(script="1.py")).startswith("job-1-")


def test_one_builder_refuses_for_both_faces_in_their_words(tmp_path: Path) -> None:
    """The command line and the Python API build through `build`: the same checks, each face's words."""
    for words, image in ((FLAGS, "--image pytorch/"), (ARGUMENTS, 'image="pytorch/')):
        with pytest.raises(UserError, match="does not exist") as e:
            build(JobSpec(Entry(script=str(tmp_path / "missing.py"))), words=words)
        assert words.other_entries in (e.value.fix or "")
        with pytest.raises(UserError, match=words.need_image) as e:
            build(JobSpec(Entry(module="m")), kube=True, words=words)
        assert image in (e.value.fix or "")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"directory without __main__\.py"):
        build(JobSpec(Entry(script=str(tmp_path / "empty"))))


def test_a_script_runs_from_disk_here_and_travels_to_a_cluster(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    spec = JobSpec(Entry(script=str(tmp_path / "train.py")), name="t", image="img", working_dir=str(tmp_path))
    here = build(spec)
    assert here.code is None and here.job.name == "t"
    there = build(spec, kube=True)
    assert there.code == {"train.py": b"print(1)\n"}
    c = there.job.spec.pytorchReplicaSpecs["Master"].template.spec.containers[0]
    assert c.command == ["torchrun", f"{CODE_DIR}/train.py"] and c.workingDir == CODE_DIR


def test_shipped_files_run_where_the_runtime_writes_them() -> None:
    """A function's files: its runner is the entry; here the runtime picks their directory."""
    files = {"run.py": b"", "lib/x.py": b""}
    spec = JobSpec(Entry(script="run.py"), image="img", working_dir="/elsewhere")
    here = build(spec, files=files)
    assert here.code == files and here.job.name.startswith("run-")
    assert here.job.spec.pytorchReplicaSpecs["Master"].template.spec.containers[0].workingDir is None
    there = build(spec, kube=True, files=files)
    volume = there.job.spec.pytorchReplicaSpecs["Master"].template.spec.volumes[0]
    assert sorted(i.path for i in volume.configMap.items) == ["lib/x.py", "run.py"]
    assert there.job.spec.pytorchReplicaSpecs["Master"].template.spec.containers[0].command == [
        "torchrun", f"{CODE_DIR}/run.py"]


def _project(tmp_path: Path) -> Path:
    """A project in a repository: a link out of it, dotfiles, ignored files (its own .gitignore and
    the repository's), a fifo."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("*.ckpt\n")
    (tmp_path / "secret").write_text("password\n")
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "data").mkdir()
    (proj / ".cfg").mkdir()
    (proj / "__main__.py").write_text("print(1)\n")
    (proj / "sub" / "s.py").write_text("s = 1\n")
    (proj / ".env").write_text("TOKEN=x\n")
    (proj / ".cfg" / "c").write_text("c\n")
    (proj / ".gitignore").write_text("data/\n*.log\n")
    (proj / "data" / "big").write_text("d\n")
    (proj / "a.log").write_text("l\n")
    (proj / "m.ckpt").write_text("m\n")
    (proj / "alias.py").symlink_to("sub/s.py")  # a link inside: its file goes under its name
    (proj / "gone.py").symlink_to("sub/missing.py")  # a link to nothing: left out, said
    os.mkfifo(proj / "pipe")  # never read (a read would block)
    return proj


def test_a_directory_ships_no_dotfile_nor_ignored_file_unless_included(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    assert collect(proj) == {"__main__.py": b"print(1)\n", "alias.py": b"s = 1\n", "sub/s.py": b"s = 1\n"}
    chosen = select(proj)
    assert set(chosen.left_out) == {".cfg/ (a dot directory)", ".env (a dotfile)", ".gitignore (a dotfile)",
                                    "data/ (.gitignore)", "a.log (.gitignore)", "m.ckpt (.gitignore)",
                                    "pipe (not a regular file)", "gone.py (a link to nothing)"}
    assert set(collect(proj, include=[".env", "data/", ".cfg/c"])) == {
        "__main__.py", "alias.py", "sub/s.py", ".env", "data/big", ".cfg/c"}
    with pytest.raises(UserError, match=r"--include '!' is not a gitignore pattern") as e:
        collect(proj, include=["!"])
    assert e.value.fix
    (proj / ".gitignore").write_text("!\n*.log\n")  # a line git cannot read is skipped, the others kept
    assert "a.log (.gitignore)" in select(proj).left_out


def test_a_directory_a_parents_gitignore_ignores_still_ships_when_named(tmp_path: Path) -> None:
    """`scratch/` in the repository's .gitignore: `scratch/exp` named to ship goes, its `*.ckpt` stays."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("scratch/\n*.ckpt\n")
    exp = tmp_path / "scratch" / "exp"
    exp.mkdir(parents=True)
    (exp / "__main__.py").write_text("print(1)\n")
    (exp / "model.py").write_text("m = 1\n")
    (exp / "w.ckpt").write_text("w\n")
    chosen = select(exp)
    assert [rel for rel, _ in chosen.files] == ["__main__.py", "model.py"]
    assert chosen.left_out == ("w.ckpt (.gitignore)",)


def test_a_link_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    (proj / "creds").symlink_to("../secret")
    with pytest.raises(UserError, match=r"creds is a link to .*secret, outside the directory") as e:
        collect(proj)
    assert e.value.fix and "copy" in e.value.fix
    (proj / "creds").unlink()
    (proj / "up").symlink_to(tmp_path, target_is_directory=True)  # a directory link out: refused too
    with pytest.raises(UserError, match="up is a link to"):
        collect(proj)
    (proj / "up").unlink()
    (proj / ".hidden").symlink_to("../secret")  # left out as a dotfile: never followed, nothing refused
    assert ".hidden" not in collect(proj)


def test_sizes_are_checked_by_stat_before_any_file_is_read(tmp_path: Path) -> None:
    """A 4 GiB file (sparse: nothing written) refuses the directory before a byte is read: in a process
    that may map 1 GiB in all, reading it would end in MemoryError instead of the refusal."""
    proj = _project(tmp_path)
    with (proj / "weights.bin").open("wb") as f:
        f.truncate(4 << 30)
    probe = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
             "from torchjob.api.shipping import collect\nfrom torchjob.api.errors import UserError\n"
             f"try:\n    collect({str(proj)!r})\nexcept UserError as e:\n    print('refused:', e.message)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "refused:" in done.stdout and "is 4,294,967," in done.stdout, done.stderr


def test_build_says_which_files_go_and_which_stay(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    spec = JobSpec(Entry(script=str(proj)), name="t", image="img")
    built = build(spec, kube=True)
    assert built.code is not None and set(built.code) == {"__main__.py", "alias.py", "sub/s.py"}
    said = built.shipped()
    assert said is not None and "ConfigMap t-code: __main__.py, alias.py, sub/s.py" in said
    assert ".env (a dotfile)" in said and "--include" in said
    with_env = build(replace(spec, include=(".env",)), kube=True)
    assert with_env.code is not None and with_env.code[".env"] == b"TOKEN=x\n"
    assert build(spec).shipped() is None  # locally the directory runs where it is: nothing ships
