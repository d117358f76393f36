"""The `torchjob` command's side of a cluster (`--kube`): submit a job, read it (its object, pods and
events), suspend, resume and delete it, as the user's kubeconfig allows. Never runs a controller."""
