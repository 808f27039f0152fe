package agent

import (
	"context"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// buildMonitors constructs the enabled monitors of the table
// (pkg/monitors). A disabled monitor is simply not built, so its condition
// is removed and nothing more is written for it.
func buildMonitors(c config.Config, env detection.Env, opts Options, pods podCache, labels accel.NodeLabels, dcgmFor func(dcgm.Config) *dcgm.Source) []detection.Monitor {
	deps := monitors.Deps{
		NodeName: opts.NodeName, Pods: containerruntime.PodLister(pods), NodeLabels: labels, Hosts: opts.Hosts, DCGM: dcgmFor,
	}
	if opts.Cloud != nil {
		deps.CloudEvents = opts.Cloud.Events
	}
	var ms []detection.Monitor
	for _, k := range monitors.Table() {
		if s := c.Monitors.Section(k.Name); s != nil && s.On() {
			ms = append(ms, k.New(env, deps, s))
		}
	}
	return ms
}

// nodeLabels serves this node's labels to the accelerator monitors (expected
// device counts) from a cache refreshed at most every labelTTL: a check every
// 30 s on thousands of nodes must not become API load.
func (a *Agent) nodeLabels() accel.NodeLabels {
	const labelTTL = 5 * time.Minute
	var (
		mu      sync.Mutex
		labels  map[string]string
		fetched time.Time
	)
	return func(ctx context.Context) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := a.opts.Clock.Now()
		if labels != nil && now.Sub(fetched) < labelTTL {
			return labels, nil
		}
		n, err := a.opts.Client.GetNode(ctx, a.opts.NodeName)
		if err != nil {
			if labels != nil {
				return labels, nil // stale labels beat none
			}
			return nil, err
		}
		labels, fetched = n.Labels, now
		if labels == nil {
			labels = map[string]string{}
		}
		return labels, nil
	}
}
