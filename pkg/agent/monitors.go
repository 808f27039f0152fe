package agent

import (
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/agent/monitor"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/runtime"
)

// buildMonitors constructs the enabled monitors. This is the one place that
// knows every monitor kind; a disabled monitor is simply not built, so its
// condition is removed and nothing more is written for it.
func buildMonitors(c config.Config, env monitor.Env, opts Options, pods podCache) []monitor.Monitor {
	var ms []monitor.Monitor
	if k := c.Monitors.Kernel; *k.Enabled {
		ms = append(ms, kernel.New(env, kernel.Options{
			LimitsPeriod: k.CheckInterval.Duration,
			ZombiePeriod: 2 * k.CheckInterval.Duration,
			ClockPeriod:  k.CheckInterval.Duration,
			Timex:        opts.Timex,
		}))
	}
	if r := c.Monitors.ContainerRuntime; *r.Enabled {
		ms = append(ms, runtime.New(env, runtime.Options{
			SocketPath:       r.CRISocket,
			CallTimeout:      r.CRITimeout.Duration,
			ResponsivePeriod: r.CheckInterval.Duration,
			StuckPodPeriod:   r.CheckInterval.Duration,
			NodeName:         opts.NodeName,
			Pods:             runtime.PodLister(pods),
		}))
	}
	return ms
}
