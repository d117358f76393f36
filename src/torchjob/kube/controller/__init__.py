"""The controller, in rooms by role: `round/` (one round per job: observe -> core.reconcile once -> write
status -> act; the admission gates; each job's memory), `pods/` (each job's pods as a round needs them, pods
on their way out, the ConfigMaps pods project, a stalled job's stacks) and `process/` (the operator's wiring
from one OperatorConfig: controllers, informers, the work queue, leader election). The only room of kube/
that may import every other room but clientside."""
