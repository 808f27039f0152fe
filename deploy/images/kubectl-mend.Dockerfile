# syntax=docker/dockerfile:1
# kubectl-mend, for running the plugin where kubectl and krew are not at
# hand (CI jobs, a debug pod). Most users install it with krew
# (deploy/krew/mend.yaml). Build from the repository root:
#   docker buildx build -f deploy/images/kubectl-mend.Dockerfile -t REGISTRY/kubectl-mend:TAG .
# Run: docker run --rm -v ~/.kube:/home/nonroot/.kube:ro REGISTRY/kubectl-mend:TAG status

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/kubectl-mend ./cmd/kubectl-mend

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kubectl-mend /kubectl-mend
USER 65532:65532
ENTRYPOINT ["/kubectl-mend"]
