package agent

import (
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/monitor"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
	"nodemend.dev/nodemend/pkg/monitors/runtime"
)

// buildMonitors constructs the enabled monitors of the table
// (pkg/monitors). A disabled monitor is simply not built, so its condition
// is removed and nothing more is written for it.
func buildMonitors(c config.Config, env monitor.Env, opts Options, pods podCache, labels accel.NodeLabels, dcgmFor func(dcgm.Config) *dcgm.Source) []monitor.Monitor {
	deps := monitors.Deps{
		NodeName: opts.NodeName, Pods: runtime.PodLister(pods), NodeLabels: labels, NVML: opts.NVML, Timex: opts.Timex, DCGM: dcgmFor,
	}
	var ms []monitor.Monitor
	for _, k := range monitors.Table() {
		if s := c.Monitors.Section(k.Name); s != nil && s.On() {
			ms = append(ms, k.New(env, deps, s))
		}
	}
	return ms
}
