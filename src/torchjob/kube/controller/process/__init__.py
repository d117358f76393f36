"""The operator as one process: config (OperatorConfig, from `torchjob operator`'s flags), operator (the
wiring: controllers, leader election, health and metrics) and controller (a kind's informers, workers and
work queue)."""
