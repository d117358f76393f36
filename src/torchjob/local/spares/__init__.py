"""The local runtime's warm spares (runPolicy.warmSpares): `spare` (one spare process and its
handover to an attempt), `keeper` (the supervisor's spare per replica), `workers` (the spares of
torchrun's workers, inside a replica's agent) and `launcher/torchjob_spare.py` (the program a spare
runs, by path; the in-place restart of a pod ships the same file: kube/objects/front/inplace.py)."""
