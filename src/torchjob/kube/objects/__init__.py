"""Pure builders of the Kubernetes objects a job becomes, in rooms by role: `workload/` (what a job runs as: its
pods and headless Service, initializer steps, claims, code, TensorBoard, how pods report progress, how a pod
ended), `front/` (what runs in front of a pod's command: the shipped programs, restart in place, stacks),
`admission/` (PodGroups and Kueue Workloads), `labels/` (names, labels and owner references) and `install/`
(the install manifests, the CRDs, whose install they are). Dicts in, dicts out; no I/O. Imports api, core and
torchjob.progress (the report paths), never the machinery or a controller."""
