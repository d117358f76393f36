"""A job document that would take the reader down (issue 19, finding 9): YAML aliases that expand
it exponentially, nesting deeper than anything recursive survives. Refused fast, exit 2, a message
that says what; as the Kubernetes API server's YAML reader refuses them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.dialects.cli import torchjob

BOMB = "\n".join([f'{n}: &{n} [{", ".join([f"*{p}" if p else "x"] * 9)}]'
                  for p, n in zip(["", *"abcdefgh"], "abcdefghi", strict=True)]) + "\n"  # 9^9 values


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text,message", [
    (BOMB, "the document's aliases expand it past 100000 values"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than 100 deep"),
    ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 1500)) + "  " * 1500 + "v\n",
     "nested more than 100 deep"),
    ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", "nested more than 100 deep"),
])
def test_a_document_that_would_take_the_reader_down_is_refused_fast(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "job.yaml").write_text(text)
    start = time.process_time()  # CPU time: what a bomb would burn; the wall clock is the machine's load
    for command in (["validate"], ["render"], ["convert", "--to", "kubeflow"]):
        result = torchjob(*command, str(tmp_path / "job.yaml"))
        assert result.code == 2 and result.err.startswith("error: "), result.err
        assert message in result.err and "Traceback" not in result.err
    assert time.process_time() - start < 6  # three readings, each well under 2 s of CPU


def test_aliases_within_reason_are_read_as_before(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("""apiVersion: torchjob.dev/v1
kind: TorchJob
metadata: {name: shared}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: &pod {spec: {containers: [{name: pytorch, image: x, command: [python, t.py]}]}}
    Worker: {replicas: 2, template: *pod}
""")
    result = torchjob("validate", str(tmp_path / "job.yaml"))
    assert result.code == 0, result.err


@pytest.mark.parametrize("text,code,message", [
    ("!!python/object apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n", 2, "could not determine a constructor"),
    ("apiVersion: torchjob.dev/v1\nkind: TorchJob\nmetadata: {name: !!python/name:os.system x}\n", 2,
     "could not determine a constructor"),
    ("a: 2020-13-45\nb: !!timestamp 2020-99-99\n!!timestamp c: !!binary '%'\n", 2,
     "unsupported document"),  # read (as text), then refused
])
def test_a_tag_no_safe_loader_makes_or_a_date_that_is_none_is_a_message(tmp_path: Path, text: str, code: int,
                                                                        message: str) -> None:
    """Found by the fuzz (tests/dialects/test_no_traceback.py): these raised from the YAML constructor."""
    (tmp_path / "job.yaml").write_text(text)
    result = torchjob("validate", str(tmp_path / "job.yaml"))
    assert result.code == code and result.err.startswith("error: ") and "Traceback" not in result.err
    assert message in result.err


def test_a_key_that_is_a_list_or_a_mapping_is_a_message(tmp_path: Path) -> None:
    """Found by the fuzz: `? ` before an indented mapping makes that mapping a key (unhashable)."""
    (tmp_path / "job.yaml").write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec:\n  Worker:\n"
                                       "?     replicas: 1\n      template: {}\n")
    result = torchjob("validate", str(tmp_path / "job.yaml"))
    assert result.code == 2 and "a mapping's key must be a plain value, not a mapping" in result.err


@pytest.mark.parametrize("extra", ["?\n", "1: 2\n", "true: x\n", "null: y\n", "1.5: z\n"])
def test_a_key_that_is_not_a_string_is_read_as_the_api_server_reads_it(tmp_path: Path, extra: str) -> None:
    """Found by the fuzz: a `?` alone made a key None, which a message's field path then choked on. Keys
    are strings, as JSON (and the API server) has them."""
    (tmp_path / "job.yaml").write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: x}\n" + extra)
    result = torchjob("validate", str(tmp_path / "job.yaml"))
    assert result.code == 2 and result.err.startswith("error: ") and "Traceback" not in result.err
