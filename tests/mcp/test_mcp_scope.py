"""Where a call of `torchjob mcp` may act (the dashboard's namespace scope), what a command's shape means,
and the command without the MCP SDK: no server, no cluster (the places are only computed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchjob.connect import ALL_NAMESPACES, Target
from torchjob.mcp.answers import Mistake
from torchjob.mcp.documents import built_from_command, load_text
from torchjob.mcp.places import Scope, Where
from torchjob.mcp.tools import Tools


def refused(tools: Tools, where: Where) -> Mistake:
    with pytest.raises(Mistake) as e:
        tools.target(where)
    return e.value


def test_a_server_of_one_namespace_acts_only_there() -> None:
    tools = Tools(Scope(Target(kube=True, context="dev", namespace="team-a")))
    assert tools.target(Where()) == Target(True, None, "dev", "team-a")
    assert tools.target(Where(namespace="team-a")) == Target(True, None, "dev", "team-a")
    m = refused(tools, Where(namespace="team-b"))
    assert m.field == "namespace" and "-n team-b" in (m.fix or "")
    assert refused(tools, Where(context="prod")).field == "context"  # another cluster than the server's
    assert tools.target(Where(kube=False)) == Target()  # this machine, asked for


def test_a_server_of_every_namespace_lists_every_one_and_acts_in_the_one_named() -> None:
    tools = Tools(Scope(Target(kube=True, namespace=ALL_NAMESPACES)))
    assert tools.target(Where(), listing=True).namespace == ALL_NAMESPACES
    assert tools.target(Where(namespace="team-b")).namespace == "team-b"
    assert tools.target(Where()).namespace is None  # one job without a namespace: the context's


def test_a_cluster_argument_on_this_machine_is_the_agents_mistake() -> None:
    tools = Tools()
    for where, field in ((Where(namespace="x"), "namespace"), (Where(context="c"), "context"),
                         (Where(kubeconfig="/k"), "kubeconfig")):
        m = refused(tools, where)
        assert m.field == field and "kube=true" in (m.fix or "")


def test_a_command_is_read_as_torchjob_run_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the server's working directory: where a script is found
    (tmp_path / "train.py").write_text("print('hi')\n")
    built = built_from_command("torchjob run -j 2x3 --name shaped --max-restarts 2 train.py -- --lr 0.1", kube=False)
    job = built.job
    assert job.name == "shaped" and job.replica_count("Master") + job.replica_count("Worker") == 2
    assert str(job.spec.nprocPerNode) == "3" and job.run_policy.backoffLimit == 2
    for command, words in (("-j 2x train.py", "2x"), ("--dry-run train.py", "preview_job"),
                           ("job.yaml", "document"), ("train.py --lr 0.1", "--"), ("'unclosed", "quotes")):
        with pytest.raises(Mistake) as e:
            built_from_command(command, kube=False)
        assert e.value.field == "command" and words in f"{e.value.reason} {e.value.fix}", (command, e.value)


def test_a_document_s_mistakes_name_their_field_and_line() -> None:
    with pytest.raises(Mistake) as e:
        load_text("apiVersion: torchjob.dev/v1\nkind: TorchJob\nmetadata: {name: x}\nspec:\n"
                  "  pytorchReplicaSpecs:\n    Master: {replicas: 0}\n")
    assert e.value.field == "document" and e.value.problems
    assert any(p["line"] and "Master" in p["field"] for p in e.value.problems), e.value.problems
    with pytest.raises(Mistake) as e:
        load_text("kind: Deployment\napiVersion: apps/v1\n")
    assert e.value.field == "document" and "torchjob reads" in (e.value.problems[0]["fix"] or "")


def test_a_submit_names_what_is_wrong_with_its_plan() -> None:
    tools = Tools()
    for args, field, words in (((None, "-j 1x1 a.py", None), "plan_id", "preview_job"),
                               ((None, "-j 1x1 a.py", "0123abcd"), "plan_id", "no plan"),
                               (("kind: TorchJob", "-j 1x1 a.py", "0123abcd"), "command", "not both")):
        with pytest.raises(Mistake) as e:
            tools.submit(*args, Where())
        assert e.value.field == field and words in f"{e.value.reason} {e.value.fix}", (args, e.value)


def test_without_the_sdk_the_command_says_what_to_install() -> None:
    code = "import sys; sys.modules['mcp'] = None; sys.argv = ['torchjob', 'mcp']\n" \
           "from torchjob.cli.main import main; main()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "pip install 'torchjob[mcp]'" in out.stderr and "Traceback" not in out.stderr
