#!/usr/bin/env bash
# gpu-check.sh is `make gpu-check` (hack/gpu-check, docs/accelerators.md):
# the agent's NVIDIA paths against this machine's GPUs. Without a GPU it
# says so before compiling anything and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 && ! compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
  echo "gpu-check: no NVIDIA GPU here (no nvidia-smi, no /dev/nvidia*): nothing to check."
  exit 0
fi
# cgo, as the agent is built: go-nvml loads libnvidia-ml through it.
CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" exec go run -tags grpcnotrace ./hack/gpu-check "$@"
