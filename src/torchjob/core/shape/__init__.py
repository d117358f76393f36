"""What each replica is started with, pure: ranks, world size, addresses and the env contract
(`topology`), `$(VAR)` expansion as the kubelet does it (`expand`), and warnings about a valid job
said before it runs (`advice`). Imports the job model only."""
