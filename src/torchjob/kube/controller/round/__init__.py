"""One round of one job: reconciler (observe -> decide once -> write -> act), observe (the World, built in
one place), round_parts (what a round is wired with), outcome (Result), refused (a pod the API server
refuses), names (who holds a name a job needs), gates (Kueue, PodGroups), memory (each job's memory)."""
