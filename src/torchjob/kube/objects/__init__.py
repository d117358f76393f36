"""Pure builders of the Kubernetes objects a job becomes: pods and the headless Service, PodGroups,
Kueue Workloads, TensorBoard, the CRDs; `labels/` (the names and labels, each served kind's in its
module) and `install/` (the install manifests and whose install they are). Dicts in, dicts out; no I/O.
Imports api, core and torchjob.progress (the report paths), never the machinery or a controller."""
