"""The controller: one round per job (observe -> core.reconcile once -> write status -> act), the
admission gates (Kueue, PodGroups), and the operator's wiring from one OperatorConfig. The only room
that may import every other room of kube/ but clientside."""
