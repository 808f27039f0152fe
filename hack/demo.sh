#!/usr/bin/env bash
# demo.sh: start the local control plane, run the demo, stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
kubeconfig="$(hack/local-cluster.sh start | tail -1)"
trap 'hack/local-cluster.sh stop' EXIT
go run ./hack/demo --kubeconfig "${kubeconfig}" --agent bin/nodemend-agent --work _output/demo
