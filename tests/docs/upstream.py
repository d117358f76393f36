"""A rank that torch itself aborts: the docs' tests run such a command once more, and say so.

In one CI run (25 Nov 2026, torch 2.15 on CPU, gloo) two `-j 2x2` jobs of the docs failed, each
with a rank of the master's torchrun killed by SIGABRT a few seconds in; what the rank said was
hidden behind torchrun's own report then (torchjob's root cause shows it now). With it, a later run
showed the cause: a rank aborting in its own teardown after training had finished ("terminate
called without an active exception"), its peers having already destroyed the group and exited.
examples/ddp/train.py now waits for every rank before tearing down; this stays as a guard.

Only that failure is tried again, once: any other failure, or the same one twice, fails the test."""

from __future__ import annotations


def torch_aborted(output: str) -> bool:
    """torchjob's root cause names a rank that torchrun saw killed by SIGABRT."""
    return any(line.lstrip().startswith("torchrun's root cause:") and "(SIGABRT)" in line
               for line in output.splitlines())
