# syntax=docker/dockerfile:1
# nodemend-controller. Build from the repository root (docs/install.md#images):
#   docker buildx build -f deploy/images/controller.Dockerfile --platform linux/amd64,linux/arm64 -t REGISTRY/nodemend-controller:TAG .
#
# A static binary (CGO_ENABLED=0), cross-compiled on the build platform, on
# a distroless static base: no shell, no package manager, non-root.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/nodemend-controller ./cmd/nodemend-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nodemend-controller /nodemend-controller
# distroless's nonroot user; the chart's pod security context says the same.
USER 65532:65532
ENTRYPOINT ["/nodemend-controller"]
