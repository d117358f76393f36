"""A rank that torch itself aborts: the docs' tests run such a command once more, and say so.

In one CI run (25 Nov 2026, torch 2.15 on CPU, gloo) two `-j 2x2` jobs of the docs failed on the
first try, each with rank 0 of the master's torchrun killed by SIGABRT a few seconds in, and never
on this machine in 4 whole-suite runs and 40 stress runs. What rank 0 said was hidden behind
torchrun's own report then (torchjob's root cause shows it now). gloo's TCP listener aborts the
process when a connection's peer is gone before it is read (pytorch/pytorch#188266), which fits.

Only that failure is tried again, once: any other failure, or the same one twice, fails the test."""

from __future__ import annotations


def torch_aborted(output: str) -> bool:
    """torchjob's root cause names a rank that torchrun saw killed by SIGABRT."""
    return any(line.lstrip().startswith("torchrun's root cause:") and "(SIGABRT)" in line
               for line in output.splitlines())
