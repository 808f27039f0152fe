#!/usr/bin/env bash
# demo.sh: the whole detect → repair → diagnose loop on the local simulation
# (sim/cmd/demo/main.go). Everything it starts stops when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
# Built as `make build` builds the static commands (no cgo, -trimpath), so
# that on a first run the demo reuses the packages that build compiled
# instead of compiling Kubernetes' client libraries once more with other
# flags (go run would).
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/sim/demo ./sim/cmd/demo
exec bin/sim/demo "$@"
