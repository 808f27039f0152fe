package agent

import (
	"context"
	"net/netip"
	"sync"

	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
)

// DiagnosticsOptions enable the diagnostics component: NodeDiagnostics of
// this node are served (bundles under <host-root>/var/log/nodemend, uploads,
// packet captures). Diagnostics share only the Kubernetes API, the host
// root and the metrics registry with detection.
type DiagnosticsOptions struct {
	// Config is the REST config for NodeDiagnostics; nil disables diagnostics.
	Config *rest.Config
	// AllowUploadPrefixes are otherwise refused addresses (private,
	// loopback, link-local) that upload URLs may reach.
	AllowUploadPrefixes []netip.Prefix
}

// startDiagnostics starts the diagnostics runner, if enabled, tracked by wg.
func (a *Agent) startDiagnostics(ctx context.Context, wg *sync.WaitGroup) {
	d := a.opts.Diagnostics
	if d.Config == nil {
		return
	}
	log := a.opts.Log.WithName("diagnostics")
	r, err := diagnostics.New(diagnostics.Options{
		Config: d.Config, Client: a.opts.Client, NodeName: a.opts.NodeName, HostRoot: a.opts.HostRoot,
		AllowUploadPrefixes: d.AllowUploadPrefixes, Gatherer: a.metrics.Registry, EffectiveConfig: a.effectiveConfig,
		GPUDiagnostics: dcgmDiagnostics{a},
		CRISocket:      a.criSocket,
		Cloud:          a.opts.Cloud,
		Clock:          a.opts.Clock, Log: log,
	})
	if err != nil {
		log.Error(err, "diagnostics disabled")
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			log.Error(err, "diagnostics stopped")
		}
	}()
}

// criSocket is the configured CRI socket, so that bundles ask the runtime
// the monitor watches (a node whose socket is not at a default path).
func (a *Agent) criSocket() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pipeline == nil {
		return ""
	}
	c, _ := config.SectionOf[containerruntime.Config](a.pipeline.cfg.Monitors)
	return c.CRISocket
}

// effectiveConfig is the config in force, for bundles.
func (a *Agent) effectiveConfig() any {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pipeline == nil {
		return nil
	}
	return a.pipeline.cfg
}
