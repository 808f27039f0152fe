#!/usr/bin/env bash
# ensure-deps.sh installs the Debian packages that tests and the demo call,
# when their commands are missing: openssl and curl (local cluster),
# journalctl and systemd-journal-remote (journal reader integration test),
# tcpdump (diagnostics packet capture test), iptables (the networking
# monitor's checks run against this machine), mmdebstrap (make images).
set -euo pipefail

declare -A need=(
  [openssl]=openssl
  [curl]=curl
  [journalctl]=systemd
  [/lib/systemd/systemd-journal-remote]=systemd-journal-remote
  [tcpdump]=tcpdump
  [iptables-save]=iptables
  [mmdebstrap]=mmdebstrap
)
missing=()
for cmd in "${!need[@]}"; do
  if [[ "${cmd}" == /* ]]; then [[ -x "${cmd}" ]] && continue
  else command -v "${cmd}" >/dev/null 2>&1 && continue
  fi
  missing+=("${need[${cmd}]}")
done
# --missing: print the packages that would be installed, install nothing.
if [[ "${1:-}" == --missing ]]; then
  [[ ${#missing[@]} -eq 0 ]] || printf '%s\n' "${missing[@]}"
  exit 0
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-deps: please install: ${missing[*]} (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "ensure-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
