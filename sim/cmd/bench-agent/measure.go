package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// measureIdle: both agents idle on healthy hosts; CPU over d, memory at
// its end.
func measureIdle(ctx context.Context, agents []*agent, d time.Duration) error {
	start := time.Now()
	ticks := make([]int64, len(agents))
	for i, a := range agents {
		ticks[i] = cpuTicks(a.pid())
	}
	if err := sleep(ctx, d); err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	for i, a := range agents {
		if err := a.alive(); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		a.idleCPU = float64(cpuTicks(a.pid())-ticks[i]) / ticksPerSecond / elapsed * 100
		a.rss, a.anon, a.file = memKiB(a.pid(), "VmRSS:"), memKiB(a.pid(), "RssAnon:"), memKiB(a.pid(), "RssFile:")
	}
	return nil
}

// floodLines are kernel lines of a busy, healthy node (formats as the
// kernel prints them); none is a fault, so every line is read, matched
// against every rule and dropped: the cost a chatty kernel puts on the agent.
var floodLines = []string{
	"IPv6: ADDRCONF(NETDEV_CHANGE): veth%04x: link becomes ready",
	"cni0: port %d(veth%04x) entered forwarding state",
	"cni0: port %d(veth%04x) entered disabled state",
	"device veth%04x entered promiscuous mode",
	"eth0: renamed from tmp%04x",
	"EXT4-fs (nvme1n1p%d): mounted filesystem %04x-with ordered data mode. Quota mode: none.",
	"audit: type=1400 audit(1700000000.%03d:%d): apparmor=\"STATUS\" operation=\"profile_load\" name=\"cri-containerd.apparmor.d\"",
	"overlayfs: upper fs does not support RENAME_WHITEOUT (%d/%04x).",
	"nf_conntrack: default automatic helper assignment has been turned off for security reasons (%d, %04x)",
	"TCP: request_sock_TCP: Possible SYN flooding on port %d. Sending cookies. Check SNMP counters %04x.",
}

// measureFlood writes rate lines/s to both hosts for d (in batches every
// 10 ms, as a busy kernel does) and charges each agent's CPU during the
// flood and a short drain after it to the lines written.
func measureFlood(ctx context.Context, agents []*agent, rate int, d time.Duration) error {
	const tick = 10 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	ticks := make([]int64, len(agents))
	for i, a := range agents {
		ticks[i] = cpuTicks(a.pid())
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	n := 0
	deadline := time.Now().Add(d)
	batch := make([]string, perTick)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		for j := range batch {
			batch[j] = fmt.Sprintf(floodLines[(n+j)%len(floodLines)], (n+j)%4096, n+j)
		}
		for _, a := range agents {
			if _, err := a.kmsg(6, batch...); err != nil {
				return err
			}
		}
		n += perTick
	}
	// Let the agents read what was written last.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	for i, a := range agents {
		if err := a.alive(); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		cpu := float64(cpuTicks(a.pid())-ticks[i]) / ticksPerSecond
		a.floodLines = n
		a.floodCPU = cpu / (float64(n) / 1000)
		a.floodRSS, a.floodHWM = memKiB(a.pid(), "VmRSS:"), memKiB(a.pid(), "VmHWM:")
	}
	return nil
}

// faultGap is the time between the latency phase's faults: more than the
// agent's client needs to earn back the write a fault spends.
const faultGap = 500 * time.Millisecond

// measureLatency writes faults Fatal kernel lines to each agent's host,
// one at a time (each a fork refused in another host cgroup, so each
// changes KernelReady: the first to False, the later ones its message),
// and times each until the Node's watch shows the change. Faults are
// faultGap apart: written back to back, they would time the agent's client
// rate limit (5 writes/s), not how fast a fault reaches the Node.
func measureLatency(ctx context.Context, env *testenv.Env, agents []*agent, faults int) error {
	for _, a := range agents {
		w, err := env.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", a.node).String()})
		if err != nil {
			return err
		}
		last := ""
		for i := 0; i < faults; i++ {
			written, err := a.kmsg(3, fmt.Sprintf("cgroup: fork rejected by pids controller in /system.slice/bench-%d.service", i))
			if err != nil {
				w.Stop()
				return err
			}
			timeout := time.NewTimer(30 * time.Second)
		wait:
			for {
				select {
				case <-ctx.Done():
					w.Stop()
					return ctx.Err()
				case <-timeout.C:
					w.Stop()
					return fmt.Errorf("%s: fault %d not on the Node after 30 s", a.name, i)
				case ev, ok := <-w.ResultChan():
					if !ok {
						w.Stop()
						return fmt.Errorf("%s: the Node watch ended", a.name)
					}
					if ev.Type != watch.Modified {
						continue
					}
					c := kernelReady(ev.Object.(*corev1.Node))
					if c != nil && c.Status == corev1.ConditionFalse && c.Message != last {
						a.latencies = append(a.latencies, time.Since(written))
						last = c.Message
						break wait
					}
				}
			}
			timeout.Stop()
			if err := sleep(ctx, faultGap); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
		lat := slices.Clone(a.latencies)
		slices.Sort(lat)
		a.latP50, a.latMax = lat[len(lat)/2], lat[len(lat)-1]
	}
	return nil
}
