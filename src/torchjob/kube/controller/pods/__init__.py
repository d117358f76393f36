"""A job's pods as the rounds need them: pod_index (each job's pods, split), seen_pods (a big job's pods as
its last round saw them), leaving (pods on their way out), deletes (each pod's delete asked once),
configmaps (what a namespace's pods project), stall_stacks (a stalled job's stacks, taken before it is
stopped)."""
