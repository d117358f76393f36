"""Progress on Kubernetes: the books of each job's reports, the receiver that authenticates and
accepts them, the writer of `status.progress`, their gauges, and the endpoint's TLS. It knows
nothing of controllers: it reads the caches through `progress.view.CachesView`. It may import
`kube.machinery`, `kube.objects` and `kube.served`, never `kube.controller`."""
