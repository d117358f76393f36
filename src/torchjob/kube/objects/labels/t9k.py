"""The label on the pods and Service of a T9k PyTorchTrainingJob torchjob serves: what tells them from
a TorchJob's of the same name (the operator's informers of each kind select by it). Pure."""

from __future__ import annotations

LABEL_KIND = "torchjob.dev/served-kind"
KIND = "PyTorchTrainingJob"


def labels() -> dict[str, str]:
    return {LABEL_KIND: KIND}
