"""What a job runs as: pods (a replica's Pod, the headless Service, a job's first objects), init_container
(wait-for-master), steps (initializer pods), claims (PersistentVolumeClaims), code (the code's ConfigMap),
reporting (the progress endpoint's env, volume and CA ConfigMap), tensorboard, and pod_status (how a pod
ended)."""
