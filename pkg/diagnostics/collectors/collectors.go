// Package collectors defines what a diagnostic bundle contains, by category:
// base, kernel, system, runtime, networking, storage, accelerators, nodemend.
//
// Every host path is read under Env.HostRoot; commands go through
// Env.Commands and netlink through Env.Netlink, so tests run the whole set
// against a fake host. Parsing and formatting are pure functions next to the
// collector that uses them.
package collectors

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// Env is what collectors read from.
type Env struct {
	HostRoot string
	NodeName string
	Commands command.Runner
	Netlink  Netlink
	// Since starts time-based logs (journal).
	Since time.Time
	// LogTailBytes is how much of the end of a log file is copied (default
	// 32 MiB): the newest lines matter, and old rotated data must not crowd
	// the bundle's size cap.
	LogTailBytes int64
	// CRISocket is the host path of the CRI socket; empty tries containerd's
	// and CRI-O's default paths.
	CRISocket string
	// Client reads the node's conditions and events (nodemend category);
	// nil leaves them out.
	Client *coreclient.Client
	// Gatherer is the agent's metrics registry; nil leaves metrics out.
	Gatherer prometheus.Gatherer
	// EffectiveConfig returns the agent's config in force; nil leaves it out.
	EffectiveConfig func() any
	// Now is the capture's start.
	Now time.Time
	// GPUDiagnosticFile is the path of the output of a GPU diagnostic the
	// same NodeDiagnostic ran (the agent's own file, not under the host
	// root); empty when none was asked for.
	GPUDiagnosticFile string
	// Cloud reads the instance's metadata service (identity, placement,
	// scheduled events); nil leaves it out.
	Cloud cloudmeta.Provider
	// IPAMDIntrospection and IPAMDMetrics are the VPC CNI's ipamd
	// endpoints (host:port); empty means its defaults on loopback.
	IPAMDIntrospection string
	IPAMDMetrics       string
}

func (e *Env) tail() int64 {
	if e.LogTailBytes > 0 {
		return e.LogTailBytes
	}
	return 32 << 20
}

// For returns the collectors of the given categories (all when empty), in
// bundle order.
func For(env *Env, categories []v1alpha1.LogCategory) []collect.Collector {
	want := map[v1alpha1.LogCategory]bool{}
	for _, c := range categories {
		want[c] = true
	}
	var out []collect.Collector
	for _, c := range v1alpha1.AllLogCategories() {
		if len(want) > 0 && !want[c] {
			continue
		}
		switch c {
		case v1alpha1.CategoryBase:
			out = append(out, base(env)...)
		case v1alpha1.CategoryKernel:
			out = append(out, kernel(env)...)
		case v1alpha1.CategorySystem:
			out = append(out, system(env)...)
		case v1alpha1.CategoryRuntime:
			out = append(out, runtimeCollectors(env)...)
		case v1alpha1.CategoryNetworking:
			out = append(out, networking(env)...)
		case v1alpha1.CategoryStorage:
			out = append(out, storage(env)...)
		case v1alpha1.CategoryAccelerators:
			out = append(out, accelerators(env)...)
		case v1alpha1.CategoryNodemend:
			out = append(out, nodemend(env)...)
		}
	}
	return out
}
