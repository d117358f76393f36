"""What runs in front of a pod's command: shipped (the ConfigMap of programs in pods, the hash-checked boot
stub), inplace (a replica's restart in place, runPolicy.warmSpares), stacks (a pod's ranks give their
stacks on request)."""
