#!/usr/bin/env bash
# helm.sh builds the helm CLI that the real-node tier (make e2e-node,
# hack/real-node.sh) installs the chart with, as a user does, from the Go
# module proxy at the version pinned in hack/tools/go.mod, into a cache keyed
# by that version. A second run finds it and returns at once. The chart tests
# and hack/render-manifests render with the Helm library of the same version
# (deploy/deploytest/helmrender; a test keeps the two pins together) and do
# not need it.
#
# Usage: hack/helm.sh        Prints the path of the helm binary as its last line.
# Environment: NODEMEND_CACHE (default ~/.cache/nodemend)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1=="helm.sh/helm/v4"{print $2}' "${here}/tools/go.mod")"
[[ -n "${version}" ]] || { echo "helm.sh: helm.sh/helm/v4 is not pinned in hack/tools/go.mod" >&2; exit 1; }
dir="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}/helm/helm-${version}_$(go env GOOS)-$(go env GOARCH)"
bin="${dir}/helm"

mkdir -p "${dir}"
# One build at a time: a caller that starts while another builds waits for
# that build and takes its binary instead of compiling helm again.
[[ -x "${bin}" ]] || { exec 9>"${dir}/.lock"; flock 9; }
if [[ ! -x "${bin}" ]]; then
  echo "building helm ${version} into ${dir} — first time only, a few minutes on 2 cores" >&2
  start=$SECONDS
  # helm's own release build stamps its version this way; `helm version`
  # then reports the pin instead of "main".
  ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${version}"
  # Build to a temporary name of its own and rename, so an interrupted
  # build never leaves a half-written binary that a later run would trust,
  # and test packages that build it at once (go test ./... on a cold cache)
  # do not take each other's file: the last rename wins, with the same binary.
  tmp="$(mktemp "${dir}/.helm.XXXXXX")"
  trap 'rm -f "${tmp}"' EXIT
  (cd "${here}/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}" helm.sh/helm/v4/cmd/helm)
  mv -f "${tmp}" "${bin}"
  echo "built helm in $((SECONDS - start))s" >&2
fi
echo "${bin}"
