"""Kubernetes machinery that knows nothing of jobs: the API as plain dicts, informers, the work
queue, leader election, metrics, the health port and JSON logs. Imports nothing else of torchjob."""
