// The dev real node's pause image; built by scripts/dev-cluster.sh.
module torchjob.dev/hack/realnode/pause

go 1.26.0
