package agent

import (
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/monitor"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/amdgpu"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/networking"
	"nodemend.dev/nodemend/pkg/monitors/neuron"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
	"nodemend.dev/nodemend/pkg/monitors/runtime"
	"nodemend.dev/nodemend/pkg/monitors/storage"
)

// buildMonitors constructs the enabled monitors. This is the one place that
// knows every monitor kind; a disabled monitor is simply not built, so its
// condition is removed and nothing more is written for it.
func buildMonitors(c config.Config, env monitor.Env, opts Options, pods podCache, labels accel.NodeLabels, dcgmSrc *dcgm.Source) []monitor.Monitor {
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
	if n := c.Monitors.Networking; *n.Enabled {
		ms = append(ms, networking.New(env, networking.Options{
			Period:            n.CheckInterval.Duration,
			ProbeTimeout:      n.ProbeTimeout.Duration,
			ExcludeInterfaces: n.ExcludeInterfaces,
			NetNS:             n.NetNS,
			DNSServer:         n.DNSServer,
			DNSQueryName:      n.DNSQueryName,
			KubeProxyHealthz:  n.KubeProxyHealthz,
		}))
	}
	if st := c.Monitors.Storage; *st.Enabled {
		ms = append(ms, storage.New(env, storage.Options{
			Period:       st.CheckInterval.Duration,
			Filesystems:  st.Filesystems,
			ProbeDir:     st.ProbeDir,
			ProbeTimeout: st.ProbeTimeout.Duration,
		}))
	}
	// The accelerator monitors share AcceleratedHardwareReady and apply only
	// where their hardware is (monitor.Applier).
	if n := c.Monitors.Nvidia; *n.Enabled {
		ms = append(ms, nvidia.New(env, nvidia.Options{
			Open:        opts.NVML,
			LibraryPath: n.NVMLLibrary,
			Expect:      expectOptions(n.AcceleratorMonitor, accel.NvidiaGPUs),
			NodeLabels:  labels,
			CheckPeriod: n.CheckInterval.Duration,
			DCGM:        dcgmSrc,
			DCGMPeriod:  n.DCGM.CheckInterval.Duration,
		}))
	}
	if n := c.Monitors.Neuron; *n.Enabled {
		ms = append(ms, neuron.New(env, neuron.Options{
			Expect: expectOptions(n, accel.NeuronDevices), NodeLabels: labels, CheckPeriod: n.CheckInterval.Duration,
		}))
	}
	if a := c.Monitors.AMDGPU; *a.Enabled {
		ms = append(ms, amdgpu.New(env, amdgpu.Options{
			Expect: expectOptions(a, accel.AMDGPUs), NodeLabels: labels, CheckPeriod: a.CheckInterval.Duration,
		}))
	}
	return ms
}

func expectOptions(m config.AcceleratorMonitor, table func() map[string]int) accel.ExpectOptions {
	o := accel.ExpectOptions{Count: m.ExpectedCount, Label: m.ExpectedCountLabel}
	if *m.InstanceTypeTable {
		o.Table = table()
	}
	return o
}
