"""Pure builders of the Kubernetes objects a job becomes: pods and the headless Service, PodGroups,
Kueue Workloads, TensorBoard, the CRDs and the install manifests. Dicts in, dicts out; no I/O.
Imports api, core and torchjob.progress (the report paths), never the machinery or a controller."""
