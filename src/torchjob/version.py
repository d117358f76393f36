"""torchjob's version: below every layer (it imports nothing), so any module may read it without
loading the package face (`torchjob/__init__.py`, which loads the Python API on first use).
pyproject.toml and the chart's appVersion say the same (tests/test_version.py checks them)."""

__version__ = "0.1.0"
