"""`Job.from_script` of a directory for a cluster ships what `torchjob run --kube` ships: no dotfile,
no ignored file, but what `include` names (issue 30, item 3). Pure: nothing is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

import torchjob
from torchjob.api.errors import UserError


def shipped(job: torchjob.Job) -> set[str]:
    spec = job.to_dict(kube=True)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return {item["path"] for item in spec["volumes"][0]["configMap"]["items"]}


def test_from_script_leaves_dotfiles_out_unless_included(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "__main__.py").write_text("print(1)\n")
    (proj / ".env").write_text("TOKEN=x\n")
    (proj / ".gitignore").write_text("*.ckpt\n")
    (proj / "w.ckpt").write_text("w\n")
    assert shipped(torchjob.Job.from_script(proj, image="img")) == {"__main__.py"}
    assert shipped(torchjob.Job.from_script(proj, image="img", include=[".env", "*.ckpt"])) == {
        "__main__.py", ".env", "w.ckpt"}
    with pytest.raises(UserError, match="not a list of patterns") as e:
        torchjob.Job.from_script(proj, image="img", include=".env")  # a string is one pattern's letters
    assert e.value.fix and 'include=[".env"' in e.value.fix
