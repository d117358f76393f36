"""torchjob: run PyTorch distributed training jobs locally or on Kubernetes."""

__version__ = "0.1.0"
