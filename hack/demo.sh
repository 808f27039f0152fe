#!/usr/bin/env bash
# demo.sh: the whole detect → repair → diagnose loop on the local simulation
# (sim/cmd/demo/main.go). Everything it starts stops when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./sim/cmd/demo "$@"
