"""Defaults that more than one layer names (kept free of imports: the CLI reads them at start-up)."""

INIT_IMAGE = "busybox:1.36"  # the workers' wait-for-master init container: the operator's --init-image
