# nodemend — see README.md. Every target installs or builds what it needs.
SHELL := /bin/bash
GO ?= go
BIN := bin
# nodemend-agent's build tags. grpcnotrace: gRPC (the CRI client) leaves out
# golang.org/x/net/trace, whose html/template keeps the linker from dropping
# unused methods: 6 MB of the agent's binary (docs/agent.md#footprint).
# agent.Dockerfile and hack/images build with the same tags (deploy/deploytest).
AGENT_TAGS := grpcnotrace

.PHONY: measure-cold tidy gpu-check helm images images-check images-reproducible images-docker all demo test test-short test-outage-realtime e2e e2e-node bench bench-fleet bench-fleet-karpenter bench-agent build generate verify-generate update-reason-lock lint fmt vet kube-binaries sim-binaries deps local-cluster-start local-cluster-stop clean

all: build

## demo: the whole detect → repair → diagnose loop on the local simulation (see README). hack/prepare.sh
## builds what it needs first, as numbered steps with the time each took when measured (README "First run")
demo:
	GO=$(GO) hack/prepare.sh demo

## test: every test, against a real kube-apiserver + etcd built from pinned sources (hack/prepare.sh, as demo)
test:
	GO=$(GO) hack/prepare.sh test

## measure-cold: the first run of demo and test from empty caches of their own (this machine's stay), step by step
measure-cold:
	hack/measure-cold.sh

## gpu-check: the agent's NVIDIA paths against this machine's GPUs, judged against nvidia-smi and the tests'
## fixtures (docs/accelerators.md#make-gpu-check); RESET=<bus id of an idle GPU> also resets it. No GPU: exits 0.
gpu-check:
	hack/gpu-check.sh $(if $(RESET),-reset $(RESET))

## test-outage-realtime: the agent through a real minute of API outage per mode (docs/agent.md, API outages; ~3 min)
test-outage-realtime: kube-binaries deps
	KUBEBUILDER_ASSETS="$$(hack/kube-binaries.sh | tail -1)" $(GO) test -tags realtime -count=1 -timeout 10m -run TestEveryRequestKindBacksOffThroughARealMinute -v ./pkg/agent/

## e2e: the simulation as assertions (Karpenter replacement, the gate, tolerations, PDBs, leader loss); needs root
e2e: build kube-binaries sim-binaries deps
	KUBEBUILDER_ASSETS="$$(hack/kube-binaries.sh | tail -1)" $(GO) test -tags e2e -count=1 -timeout 20m -v ./e2e/

## e2e-node: nodemend on a real node — kubelet, kube-proxy and containerd on this machine, the chart
## installed from the images `make images` built (docs/install.md "Try it on a real node"); needs root
e2e-node: build images helm
	hack/kube-binaries.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy >/dev/null
	$(GO) test -tags e2enode -count=1 -timeout 30m -v ./e2e/realnode/

## bench-fleet: nodemend-controller on 5,000 kwok nodes, 20% unhealthy (results in _output/bench-fleet);
## CONTROLLER_ARGS="--max-concurrent-reconciles 32" passes flags to the controller
bench-fleet: build kube-binaries sim-binaries deps
	$(GO) run ./sim/cmd/bench-fleet $(if $(CONTROLLER_ARGS),-controller-args "$(CONTROLLER_ARGS)")

## bench-fleet-karpenter: the same Ready=False storm (15% of every pool, kubelets stopped) on Karpenter's nodes,
## repaired by Karpenter's own NodeRepair, then by nodemend: one table (_output/bench-fleet-karpenter/side-by-side.md);
## KARPENTER_NODES sizes the fleet (default 1000)
KARPENTER_NODES ?= 1000
bench-fleet-karpenter: build kube-binaries sim-binaries deps
	$(GO) run ./sim/cmd/bench-fleet -engine karpenter,nodemend-karpenter -nodes $(KARPENTER_NODES) -pools 10 -unhealthy 0.15 \
		-timeout 60m -work _output/bench-fleet-karpenter $(if $(CONTROLLER_ARGS),-controller-args "$(CONTROLLER_ARGS)")

## bench-agent: nodemend-agent beside the agent of BASE=<ref> (default: merge-base with the latest release tag, else
## HEAD~1) on fake hosts: idle CPU, CPU per 1k kernel lines, RSS, binary size by package, fault latency (_output/bench-agent)
bench-agent: kube-binaries deps
	KUBEBUILDER_ASSETS="$$(hack/kube-binaries.sh | tail -1)" $(GO) run ./sim/cmd/bench-agent -tags "$(AGENT_TAGS)" $(if $(BASE),-base $(BASE)) $(BENCH_AGENT_FLAGS)

## bench: benchmarks with the figures quoted in issues and docs
bench: kube-binaries deps
	KUBEBUILDER_ASSETS="$$(hack/kube-binaries.sh | tail -1)" $(GO) test -run '^$$' -bench . -benchtime 2s ./...

## build: nodemend-agent with cgo (go-nvml dlopens libnvidia-ml.so.1 at run time; the same binary
## runs on nodes without the NVIDIA driver), every other command static without cgo; all stripped of symbols and DWARF
## (stack traces keep their function names and lines), as the images are. See docs/accelerators.md.
build:
	mkdir -p $(BIN)
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" $(GO) build -trimpath -tags "$(AGENT_TAGS)" -ldflags="-s -w" -o $(BIN)/ ./cmd/nodemend-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/ $$($(GO) list ./cmd/... | grep -v '/cmd/nodemend-agent$$')
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/sim/fake-nvidia-smi ./sim/cmd/fake-nvidia-smi

kube-binaries:
	hack/kube-binaries.sh >/dev/null

## helm: the helm CLI (pinned in hack/tools, the version go.mod renders the chart with), for make e2e-node
helm:
	hack/helm.sh >/dev/null

## images: OCI image archives in _output/images, built without a container engine (docs/install.md#images);
## with REGISTRY=… (and TAG=…) also pushed there. Needs root (mmdebstrap); bases and binaries are cached.
images: deps
	$(GO) run ./hack/images $(if $(REGISTRY),-registry $(REGISTRY) -push) $(if $(TAG),-tag $(TAG))

## images-check: import the archives into a private containerd and run each image (needs root)
images-check: images
	hack/images-check.sh

## images-reproducible: build the images, then again without the cache, and fail unless the digests match
images-reproducible: deps
	$(GO) run ./hack/images -verify-reproducible

## images-docker: the same images with docker buildx (deploy/images/*.Dockerfile); REGISTRY and TAG required
images-docker:
	docker buildx build -f deploy/images/agent.Dockerfile --platform linux/amd64,linux/arm64 -t $(REGISTRY)/nodemend-agent:$(TAG) .
	docker buildx build -f deploy/images/controller.Dockerfile --platform linux/amd64,linux/arm64 -t $(REGISTRY)/nodemend-controller:$(TAG) .
	docker buildx build -f deploy/images/kubectl-mend.Dockerfile -t $(REGISTRY)/kubectl-mend:$(TAG) .

## sim-binaries: kwok, Karpenter's kwok provider (Go 1.27, tools/), kube-scheduler, kube-controller-manager
sim-binaries:
	hack/sim-binaries.sh >/dev/null

deps:
	hack/ensure-deps.sh

## generate: regenerate code and docs (reason registry, deepcopy, CRDs)
generate: $(BIN)/controller-gen
	$(GO) run ./hack/genreasons
	$(BIN)/controller-gen object paths=./api/... crd:allowDangerousTypes=false paths=./api/... output:crd:dir=deploy/crds
	$(GO) run ./hack/genconfigdoc
	$(GO) run ./hack/genmigration
	$(GO) run ./hack/render-manifests

$(BIN)/controller-gen: hack/tools/go.mod
	mkdir -p $(BIN)
	cd hack/tools && CGO_ENABLED=0 $(GO) build -o ../../$(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen

## update-reason-lock: accept a breaking change to released reasons (add a CHANGELOG entry!)
update-reason-lock:
	$(GO) run ./hack/genreasons -update-lock

lint: fmt vet tidy

fmt:
	@out="$$(gofmt -l cmd pkg internal hack e2e deploy sim)"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# tidy: go.mod names what the code imports, directly or not, as it is
# (go mod tidy -diff prints what tidy would change and fails; it changes nothing),
# and hack/kubebin holds no module older than the main module does, so that the
# tests find the packages they share with the control plane already compiled
# (hack/kubebin-align.sh; run it without --check to raise them).
tidy:
	$(GO) mod tidy -diff
	hack/kubebin-align.sh --check

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/
	$(GO) vet -tags e2enode ./e2e/realnode/

local-cluster-start: kube-binaries deps
	hack/local-cluster.sh start

local-cluster-stop:
	hack/local-cluster.sh stop

clean:
	rm -rf $(BIN) _output
