"""The kinds the operator serves with one controller and one core (torchjob's TorchJob, Kubeflow's
PyTorchJob): how each is read, its status written and its pods selected; Kubeflow's status shape;
whether Kubeflow's API is served here. Imports the machinery and the objects, never a controller."""
