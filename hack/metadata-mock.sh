#!/usr/bin/env bash
# metadata-mock.sh builds AWS's EC2 instance metadata mock (ec2-metadata-mock,
# github.com/aws/amazon-ec2-metadata-mock) at the version pinned in
# hack/tools/go.mod, into a cache keyed by that version. Tests, the
# simulation and the real-node tier run it on loopback and point the agent's
# --cloud-metadata-endpoint at it: nothing of nodemend's ever asks the real
# link-local metadata address. A second run finds it and returns at once.
#
# Usage: hack/metadata-mock.sh   Prints the path of the binary as its last line.
# Environment: NODEMEND_CACHE (default ~/.cache/nodemend)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module=github.com/aws/amazon-ec2-metadata-mock
version="$(awk -v m="${module}" '$1==m{print $2}' "${here}/tools/go.mod")"
[[ -n "${version}" ]] || { echo "metadata-mock.sh: ${module} is not pinned in hack/tools/go.mod" >&2; exit 1; }
dir="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}/metadata-mock/ec2-metadata-mock-${version}_$(go env GOOS)-$(go env GOARCH)"
bin="${dir}/ec2-metadata-mock"
# --missing: print ec2-metadata-mock if not built yet, build nothing.
if [[ "${1:-}" == --missing ]]; then
  [[ -x "${bin}" ]] || echo ec2-metadata-mock
  exit 0
fi

if [[ ! -x "${bin}" ]]; then
  mkdir -p "${dir}"
  # A temporary name of its own, renamed when complete: an interrupted build
  # leaves nothing a later run would trust, and builds at once do not clash.
  tmp="$(mktemp "${dir}/.ec2-metadata-mock.XXXXXX")"
  trap 'rm -f "${tmp}"' EXIT
  # shellcheck source=lib/progress.sh
  source "${here}/lib/progress.sh"
  progress_step metadata-mock "building AWS's EC2 metadata mock ${version} into the cache" \
    bash -c 'cd "$1/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$2" "$3/cmd/ec2-metadata-mock"' _ "${here}" "${tmp}" "${module}"
  mv -f "${tmp}" "${bin}"
fi
echo "${bin}"
