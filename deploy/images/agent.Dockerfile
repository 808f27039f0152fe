# syntax=docker/dockerfile:1
# nodemend-agent. Build from the repository root (docs/install.md#images):
#   docker buildx build -f deploy/images/agent.Dockerfile --platform linux/amd64,linux/arm64 -t REGISTRY/nodemend-agent:TAG .
#
# The agent is built with cgo (go-nvml dlopens libnvidia-ml at run time,
# docs/accelerators.md), so it is a dynamically linked glibc binary: the
# build stage runs on the target platform (no cross C toolchain) and the
# runtime image is a glibc one. It carries only the host tools the agent
# runs itself (the list is checked against the code by deploy/deploytest);
# GPU tools (nvidia-smi, amd-smi, neuron-ls) must match the host's driver
# and come from the host or the vendor's container toolkit. Its build tags
# are the Makefile's AGENT_TAGS (deploy/deploytest checks that they agree).

ARG GO_VERSION=1.26.8
ARG DEBIAN_RELEASE=bookworm

FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
    go build -trimpath -ldflags="-s -w" -tags=grpcnotrace -o /out/nodemend-agent ./cmd/nodemend-agent

FROM debian:${DEBIAN_RELEASE}-slim
# journalctl (systemd): the journal source and journal collectors
# tcpdump: NodeDiagnostic packet capture
# iptables (iptables-save, ip6tables-save), nftables (nft), conntrack,
# iproute2 (ss): the networking collectors; df comes with coreutils.
RUN apt-get update \
 && apt-get install -y --no-install-recommends systemd tcpdump iptables nftables conntrack iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
COPY --from=build /out/nodemend-agent /usr/local/bin/nodemend-agent
# Root: the agent reads the host (/dev/kmsg, the journal, /proc of other
# processes, NVMe and GPU devices) through the host root mounted at /host.
# The DaemonSet runs it privileged with a read-only root filesystem.
USER 0:0
ENTRYPOINT ["/usr/local/bin/nodemend-agent"]
