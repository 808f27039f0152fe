#!/usr/bin/env bash
# demo.sh: the whole detect → repair → diagnose loop on the local simulation
# (sim/cmd/demo/main.go). Everything it starts stops when it ends.
#
# Usage: hack/demo.sh [--build] [DEMO FLAGS...]   (--build: build, do not run)
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo's own binaries, in bin/demo. They are built as `go test` and the
# control plane (hack/kube-binaries.sh) build — the default cgo setting, no
# -trimpath, no build tags — not as `make build` builds the shipped ones:
# then the 670 packages they share with the control plane (client-go,
# k8s.io/api, apimachinery, gRPC, protobuf…) come from the build cache on a
# first run instead of compiling again with other flags. They run on this
# machine only, in the simulation; `make build`, the images and make e2e
# keep the shipped flags. One go build for all of them, so that their links
# overlap with the compiling.
out=bin/demo
go build -ldflags="-s -w" -o "${out}/" ./cmd/nodemend-agent ./cmd/nodemend-controller ./cmd/kubectl-mend ./sim/cmd/demo
go build -ldflags="-s -w" -o "${out}/sim/fake-nvidia-smi" ./sim/cmd/fake-nvidia-smi
[[ "${1:-}" == --build ]] && exit 0
exec "${out}/demo" -bin "${out}" "$@"
