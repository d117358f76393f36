"""Which container of a replica trains: one rule (api/pod.py), for typed containers and for a document's data."""

from __future__ import annotations

from torchjob.api.pod import Container, training_container, training_container_of_data, training_index


def test_one_rule_picks_the_training_container() -> None:
    assert training_index(["sidecar", "pytorch", "pytorch"]) == 1
    assert training_index(["a", "b"]) == 0
    assert training_index(["sidecar", "python"], wanted="python") == 1
    assert training_container([Container(name="log"), Container(name="pytorch")]) == 1
    assert training_container_of_data([{"name": "log"}, "junk", {"name": "pytorch"}]) == 2
