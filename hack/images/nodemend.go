package main

import (
	"path"

	"nodemend.dev/nodemend/hack/images/rootfs"
)

// baseKind is how a base root file system is made.
type baseKind string

const (
	// slimBase: debian:RELEASE-slim's package set plus Packages, installed
	// by dpkg (maintainer scripts run), like `apt-get install` in a
	// Dockerfile.
	slimBase baseKind = "slim"
	// staticBase: the files of Packages only plus users, like distroless's
	// static image, for binaries that need no libc.
	staticBase baseKind = "static"
	// scratchBase: no base layer.
	scratchBase baseKind = "scratch"
)

// base is the root file system an image starts from.
type base struct {
	Name     string
	Kind     baseKind
	Release  string // Debian release
	Packages []string
	Users    []rootfs.User // staticBase
	Env      []string      // what the base image's config would set
}

// image is one image the builder makes, and the Dockerfile it must agree
// with (deploy/deploytest parses it; the agreement test compares).
type image struct {
	Name       string // repository name under the registry
	Dockerfile string // deploy/images/…; "" for the real-node tier's images, which have none
	Base       base
	Package    string // the binary's Go package
	CGO        bool
	// Tags are the binary's build tags (comma-separated): the Makefile's
	// AGENT_TAGS for the agent, which the Dockerfile passes too.
	Tags       string
	BinaryPath string // where the binary lies in the image; the entrypoint
	User       string // uid:gid
	// What the Dockerfile's final stage would add with ENV, VOLUME,
	// EXPOSE and WORKDIR (none today; the agreement test keeps it so).
	Env, Volumes, Ports []string
	WorkingDir          string
}

func (i image) binaryName() string { return path.Base(i.BinaryPath) }

// defaultPath is the PATH of Debian's images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// images are nodemend's images: the three of deploy/images, and the pause
// and workload images of the real-node test tier.
func images() []image {
	const release = "bookworm"
	// The tools the agent runs (deploy/deploytest derives the list from
	// the agent's code) and CA certificates for uploads; agent.Dockerfile
	// installs the same packages.
	agentBase := base{
		Name:     "debian-" + release + "-slim-agent",
		Kind:     slimBase,
		Release:  release,
		Packages: []string{"systemd", "tcpdump", "iptables", "nftables", "conntrack", "iproute2", "ca-certificates"},
		Env:      []string{defaultPath},
	}
	// What distroless's static-debian12 holds: CA certificates, time
	// zones, /etc/services and friends, os-release; root, nobody and the
	// nonroot user (65532) the Dockerfiles run as.
	static := base{
		Name:     "static-debian12",
		Kind:     staticBase,
		Release:  release,
		Packages: []string{"base-files", "netbase", "tzdata", "ca-certificates"},
		Users: []rootfs.User{
			{Name: "root", UID: 0, GID: 0, Home: "/root"},
			{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"},
			{Name: "nonroot", UID: 65532, GID: 65532, Home: "/home/nonroot"},
		},
		Env: []string{defaultPath, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	}
	return []image{
		{Name: "nodemend-agent", Dockerfile: "agent.Dockerfile", Base: agentBase, Package: "./cmd/nodemend-agent", CGO: true, Tags: "grpcnotrace",
			BinaryPath: "/usr/local/bin/nodemend-agent", User: "0:0"},
		{Name: "nodemend-controller", Dockerfile: "controller.Dockerfile", Base: static, Package: "./cmd/nodemend-controller",
			BinaryPath: "/nodemend-controller", User: "65532:65532"},
		{Name: "kubectl-mend", Dockerfile: "kubectl-mend.Dockerfile", Base: static, Package: "./cmd/kubectl-mend",
			BinaryPath: "/kubectl-mend", User: "65532:65532"},
		// Kubernetes' pause image: FROM scratch, its own user 65535.
		{Name: "nodemend-pause", Base: base{Name: "scratch", Kind: scratchBase}, Package: "./hack/images/pause",
			BinaryPath: "/pause", User: "65535:65535"},
		{Name: "nodemend-test-workload", Base: static, Package: "./hack/images/test-workload",
			BinaryPath: "/nodemend-test-workload", User: "65532:65532"},
	}
}
