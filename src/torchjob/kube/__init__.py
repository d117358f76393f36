"""The Kubernetes runtime, in rooms by role (tests/test_layers.py enforces who may import whom):

- machinery/  Kubernetes machinery that knows nothing of jobs: the API client, informers, the work
              queue, leader election, metrics, the health port, JSON logs.
- objects/    pure builders of the objects a job becomes (pods, the Service, PodGroups, Kueue
              Workloads, TensorBoard, the CRDs, the install manifests): dicts in, dicts out.
- served/     the kinds the operator serves (TorchJob, Kubeflow's PyTorchJob): how each is read and
              its status written, and whether Kubeflow's API is served here.
- progress/   the books of progress reports, the receiver that accepts them, the status writer,
              their gauges and the endpoint's TLS; it never sees a controller.
- controller/ one job per round (observe -> core -> write status -> act), the gates, the operator's
              wiring from one OperatorConfig.
- clientside/ what the `torchjob` command does with `--kube`: submit, read, suspend, resume, delete.
"""
