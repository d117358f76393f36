"""Defaults that more than one layer names (kept free of imports: the CLI reads them at start-up)."""

INIT_IMAGE = "busybox:1.36"  # the workers' wait-for-master init container: the operator's --init-image

# The containers torchjob adds to a job's pods (wait-for-master, TensorBoard) run as this user when
# the pod's securityContext names none (distroless's `nonroot`: no shell account, no home).
ADDED_USER = 65532
# Their requests and limits, so that a namespace whose LimitRange or ResourceQuota requires them
# admits the pod. wait-for-master is a shell loop around `nc -z` (a few MiB); TensorBoard loads
# TensorFlow's event reader.
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
TENSORBOARD_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
