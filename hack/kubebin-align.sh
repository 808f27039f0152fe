#!/usr/bin/env bash
# kubebin-align.sh keeps hack/kubebin's dependencies at least as new as the
# main module's, so that the control plane and the tests compile the packages
# they share (client-go, k8s.io/api, apimachinery, gRPC, protobuf, x/net...)
# at the same versions, and `make test` takes them from the Go build cache
# that hack/kube-binaries.sh filled instead of compiling them a second time
# (docs/install.md "Where the first run's time goes").
#
# It raises a kubebin requirement only where the main module's is newer:
# Kubernetes and etcd stay at their pins, and the minimal version selection
# is the one any module importing both would get.
#
# Usage: hack/kubebin-align.sh          raise hack/kubebin/go.mod and tidy it
#        hack/kubebin-align.sh --check  fail, naming the modules, when a raise is due (make lint)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=false
[[ "${1:-}" == --check ]] && check=true

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cp "${root}/hack/kubebin/go.mod" "${root}/hack/kubebin/go.sum" "${root}/hack/kubebin/tools.go" "${work}/"

# -mod=mod only in the copy: kubebin keeps no go.sum lines for modules it
# never builds, and the main module's files must not change.
versions() { (cd "$1" && go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all); }
versions "${root}" | sort >"${work}/main.versions"
GOFLAGS=-mod=mod versions "${work}" | sort >"${work}/kubebin.versions"

# Semantic version order (semver.org §11): numbers first, then a release
# above its pre-releases (a pseudo-version is one), pre-releases by text.
newer='
  function core(v) { sub(/^v/, "", v); sub(/[-+].*/, "", v); return v }
  function pre(v)  { sub(/\+.*/, "", v); return index(v, "-") ? substr(v, index(v, "-") + 1) : "" }
  function gt(a, b,   x, y, i, n) {
    split(core(a), x, "."); split(core(b), y, ".")
    for (i = 1; i <= 3; i++) if (x[i] + 0 != y[i] + 0) return x[i] + 0 > y[i] + 0
    if (pre(a) == pre(b)) return 0
    if (pre(a) == "") return 1
    if (pre(b) == "") return 0
    return pre(a) > pre(b)
  }
  $2 != "v0.0.0" && gt($3, $2) { print "-require=" $1 "@" $3 }'
# v0.0.0 is a staging module that k8s.io/kubernetes replaces: left alone.
mapfile -t args < <(join "${work}/kubebin.versions" "${work}/main.versions" | awk "${newer}")
if [[ ${#args[@]} -gt 0 ]]; then
  (cd "${work}" && go mod edit "${args[@]}" && GOFLAGS=-mod=mod go mod tidy)
fi

if cmp -s "${work}/go.mod" "${root}/hack/kubebin/go.mod"; then
  exit 0
fi
if [[ "${check}" == true ]]; then
  echo "hack/kubebin/go.mod holds modules older than the main module's; run hack/kubebin-align.sh:" >&2
  diff "${root}/hack/kubebin/go.mod" "${work}/go.mod" | grep '^>' >&2 || true
  exit 1
fi
cp "${work}/go.mod" "${work}/go.sum" "${root}/hack/kubebin/"
echo "hack/kubebin/go.mod raised to the main module's versions; the control plane rebuilds once" >&2
