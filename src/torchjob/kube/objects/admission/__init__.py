"""What admits a job before its pods run: gang (Volcano's or scheduler-plugins' PodGroup) and kueue (the
Workload Kueue admits)."""
