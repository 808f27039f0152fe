package rules

import "nodemend.dev/nodemend/pkg/logline"

// A realistic rule set and realistic lines for the benchmarks and the corpus
// tests. Message formats are those printed by Linux 5.x/6.x, the NVIDIA
// driver, systemd, the kubelet (klog) and containerd.

var (
	kmsgOnly    = []logline.Source{logline.Kmsg}
	journalOnly = []logline.Source{logline.Journal}
	byKernel    = []logline.Provenance{logline.ByKernel}
	bySystemd   = []logline.Provenance{logline.BySystemd}
	hostUnits   = logline.ByUnits("kubelet.service", "containerd.service", "crio.service", "init.scope")
)

var benchRules = []logline.Rule{
	// Lockups, hangs, kernel bugs.
	{Reason: "SoftLockup", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"BUG: soft lockup - CPU#"},
		Pattern: `BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s! \[(?P<comm>.*):(?P<pid>\d+)\]`,
		Message: "CPU#${cpu} stuck for ${secs}s (${comm}, PID ${pid})"},
	{Reason: "HardLockup", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"Watchdog detected hard LOCKUP on cpu "},
		Pattern: `hard LOCKUP on cpu (?P<cpu>\d+)`},
	{Reason: "RCUStall", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"rcu: INFO: ", "detected stall"}},
	{Reason: "AppBlocked", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"INFO: task ", " blocked for more than "},
		Pattern: `INFO: task (?P<comm>.+):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds`,
		Message: "task ${comm} (PID ${pid}) blocked for more than ${secs}s"},
	{Reason: "KernelBug", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"kernel BUG at "}, Pattern: `kernel BUG at (?P<where>\S+:\d+)!`},
	{Reason: "KernelBug", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"BUG: "}, Pattern: `^BUG: \S`, Exclude: []string{"BUG: soft lockup"}},
	{Reason: "KernelBug", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"Oops: "}, Pattern: `^(?:Internal error: )?Oops: `},
	{Reason: "KernelBug", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"general protection fault", "[#"}, Pattern: `^general protection fault\b.*\[#\d+\]`},
	{Reason: "UnknownNMI", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"Uhhuh. NMI received for unknown reason"}},
	// Crashes and memory.
	{Reason: "AppCrash", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"]: segfault at "},
		Pattern: `^(?P<comm>.+)\[(?P<pid>\d+)\]: segfault at (?P<addr>[0-9a-f]+) ip `,
		Message: "${comm} (PID ${pid}) crashed: segfault at 0x${addr}"},
	{Reason: "AppCrash", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"traps: ", " ip:"},
		Pattern: `^traps: (?P<comm>.+)\[(?P<pid>\d+)\] (?P<what>.+?) ip:[0-9a-f]+ sp:`},
	{Reason: "OOMKilling", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"ut of memory: Killed process "},
		Pattern: `(?P<kind>Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+) \((?P<comm>.+?)\) total-vm:\d+kB, anon-rss:(?P<anon>\d+)kB`,
		Message: "${kind}: killed ${comm} (PID ${pid}), anon-rss ${anon}kB"},
	{Reason: "OOMKilling", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"Killed process "},
		Pattern: `^Killed process (?P<pid>\d+) \((?P<comm>.+?)\) total-vm:\d+kB, anon-rss:(?P<anon>\d+)kB`},
	{Reason: "PageAllocFailure", Sources: kmsgOnly, Accept: byKernel, Contains: []string{": page allocation failure: order:"},
		Pattern: `(?P<comm>\S+): page allocation failure: order:(?P<order>\d+)`},
	{Reason: "ForkFailedOutOfPIDs", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"fork rejected by pids controller in "},
		Pattern: `fork rejected by pids controller in (?P<cgroup>/\S*)`, Exclude: []string{"controller in /kubepods"}},
	// Network.
	{Reason: "ConntrackFull", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"nf_conntrack: table full, dropping packet"}},
	{Reason: "NeighbourTableOverflow", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"neighbor table overflow!"}},
	{Reason: "TCPOutOfMemory", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"TCP: out of memory -- consider tuning tcp_mem"}},
	{Reason: "NICLinkDown", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"NIC Link is Down"},
		Pattern: `(?P<nic>\S+): NIC Link is Down`},
	{Reason: "NICUnhealthy", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"mlx5_core", "health compromised"}},
	// GPUs.
	{Reason: "GPUXid", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"NVRM: Xid (PCI:"},
		Pattern: `NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+), (?P<detail>.*)`,
		Message: "GPU ${pci}: Xid ${xid}: ${detail}"},
	{Reason: "GPULost", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"NVRM: GPU at PCI:", "has fallen off the bus"},
		Pattern: `NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+)`},
	{Reason: "GPUInitFailed", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"NVRM: GPU ", "RmInitAdapter failed!"}},
	// Storage.
	{Reason: "DiskIOError", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"I/O error, dev "},
		Pattern: `I/O error, dev (?P<dev>\w+), sector (?P<sector>\d+)`, Message: "I/O error on ${dev} at sector ${sector}"},
	{Reason: "DiskIOError", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"Buffer I/O error on dev "},
		Pattern: `Buffer I/O error on dev (?P<dev>[^,]+), logical block (?P<block>\d+)`},
	{Reason: "FilesystemError", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"EXT4-fs error (device "},
		Pattern: `EXT4-fs error \(device (?P<dev>[^)]+)\): (?P<fn>\w+)`},
	{Reason: "FilesystemReadOnly", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"EXT4-fs (", "Remounting filesystem read-only"}},
	{Reason: "FilesystemError", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"XFS (", "Please unmount the filesystem"}},
	{Reason: "FilesystemError", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"XFS (", "Corruption"}},
	{Reason: "NVMeTimeout", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"nvme", " timeout, aborting"},
		Pattern: `nvme (?P<ctrl>nvme\d+): I/O (?P<tag>\d+) QID (?P<qid>\d+) timeout, aborting`},
	{Reason: "NVMeTimeout", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"nvme", "timeout, reset controller"}},
	{Reason: "NVMeDown", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"nvme", "controller is down; will reset"}},
	// Hardware.
	{Reason: "MachineCheck", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"[Hardware Error]: "}},
	{Reason: "MemoryUE", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"EDAC MC", " UE "}},
	{Reason: "MemoryCE", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"EDAC MC", " CE "}},
	{Reason: "PCIeFatal", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"AER: ", "Uncorrected (Fatal) error"}},
	{Reason: "ThermalThrottle", Sources: kmsgOnly, Accept: byKernel, Contains: []string{"temperature above threshold, cpu clock throttled"}},
	// systemd, kubelet, runtime (journal).
	{Reason: "ContainerRuntimeFailed", Sources: journalOnly, Accept: logline.ByUnits("containerd.service", "crio.service"),
		Contains: []string{"Main process exited, code="}, Exclude: []string{"status=0/SUCCESS"},
		Pattern: `Main process exited, code=(?P<code>[a-z]+), status=(?P<status>[^\s,]+)`},
	{Reason: "KubeletFailed", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{"Main process exited, code="}, Exclude: []string{"status=0/SUCCESS"},
		Pattern: `Main process exited, code=(?P<code>[a-z]+), status=(?P<status>[^\s,]+)`},
	{Reason: "UnitFailed", Sources: journalOnly, Accept: bySystemd, Contains: []string{"Failed with result"},
		Pattern: `(?:(?P<unit>[\w@.\\-]+): )?Failed with result '(?P<result>[^']+)'`, Message: "${unit} failed: ${result}"},
	{Reason: "ServiceFailedToStart", Sources: journalOnly, Accept: bySystemd, Contains: []string{"Failed to start "},
		Pattern: `^(?:[\w@.\\-]+: )?Failed to start (?P<what>[^:"]+?)\.\s*$`},
	{Reason: "RepeatedRestart", Sources: journalOnly, Accept: bySystemd, Contains: []string{"Scheduled restart job, restart counter is at "},
		Pattern: `(?:(?P<unit>[\w@.\\-]+): )?Scheduled restart job, restart counter is at (?P<count>\d+)`},
	{Reason: "LivenessProbeFailures", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{`"Probe failed"`, `probeType="Liveness"`},
		Pattern:  `^(?:.*? pod="(?P<pod>[^"]*)")?(?:.*? containerName="(?P<container>[^"]*)")?`},
	{Reason: "ReadinessProbeFailures", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{`"Probe failed"`, `probeType="Readiness"`},
		Pattern:  `^(?:.*? pod="(?P<pod>[^"]*)")?(?:.*? containerName="(?P<container>[^"]*)")?`},
	{Reason: "PLEGUnhealthy", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{"PLEG is not healthy"}, Pattern: `pleg was last seen active (?P<ago>\S+) ago`},
	{Reason: "NetworkNotReady", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{"Container runtime network not ready"}},
	{Reason: "ContainerRuntimeUnresponsive", Sources: journalOnly, Accept: logline.ByUnits("kubelet.service"),
		Contains: []string{"rpc error: code = DeadlineExceeded"}, Pattern: `"(?P<op>[A-Za-z]+) from runtime service failed"`},
	{Reason: "ClockUnsynchronized", Sources: journalOnly, Accept: logline.ByUnits("chronyd.service"),
		Contains: []string{"Can't synchronise: no selectable sources"}},
	{Reason: "ForkFailedOutOfPIDs", Sources: journalOnly, Accept: hostUnits,
		Contains: []string{"fork/exec ", ": resource temporarily unavailable"},
		Pattern:  `fork/exec (?P<path>[^:"\s]+): resource temporarily unavailable`},
}

// kmsg is a record the kernel wrote.
func kmsg(text string) logline.Line {
	return logline.Line{Source: logline.Kmsg, Origin: logline.Origin{Kernel: true}, Text: text}
}

// journal is an entry of a root process of unit.
func journal(unit, text string) logline.Line {
	return logline.Line{Source: logline.Journal, Unit: unit, Origin: logline.Origin{Root: true}, Text: text}
}

// systemd is an entry of PID 1, about unit when it names one.
func systemd(unit, text string) logline.Line {
	return logline.Line{Source: logline.Journal, Unit: unit, Origin: logline.Origin{Manager: true, Root: true}, Text: text}
}

// noiseLines are typical lines of a busy Kubernetes node that match no rule.
var noiseLines = []logline.Line{
	kmsg("IPv6: ADDRCONF(NETDEV_CHANGE): cali5f3c2a1b9e8: link becomes ready"),
	kmsg("cni0: port 4(veth3f2a9c1d) entered forwarding state"),
	kmsg("device veth3f2a9c1d entered promiscuous mode"),
	kmsg("EXT4-fs (nvme1n1p1): mounted filesystem 7c1d4e2a-3b5f-4c6d-8e9f-0a1b2c3d4e5f r/w with ordered data mode. Quota mode: none."),
	kmsg(`audit: type=1400 audit(1772366400.123:4567): apparmor="STATUS" operation="profile_replace" info="same as current profile, skipping" profile="unconfined" name="cri-containerd.apparmor.d" pid=23456 comm="apparmor_parser"`),
	kmsg("overlayfs: fs on '/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1234/fs' does not support file handles, falling back to xino=off."),
	kmsg("nvme nvme0: 8/0/0 default/read/poll queues"),
	kmsg("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"),
	kmsg("nvidia-uvm: Loaded the UVM driver, major device number 510."),
	kmsg("kauditd_printk_skb: 18 callbacks suppressed"),
	kmsg("IPVS: rr: TCP 10.96.0.10:53 - no destination available"),
	kmsg("docker0: port 1(veth12ab34c) entered disabled state"),
	kmsg("IPv4: martian source 10.0.1.23 from 10.0.4.56, on dev eth0"),
	kmsg("mlx5_core 0000:3b:00.0 enp59s0f0np0: Link up"),
	kmsg("perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79750"),
	kmsg("process 'usr/bin/containerd-shim-runc-v2' launched '/usr/bin/runc' with NULL argv: empty string added"),
	kmsg("XFS (nvme2n1): Mounting V5 Filesystem 0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"),
	kmsg("TCP: request_sock_TCP: Possible SYN flooding on port 10250. Sending cookies.  Check SNMP counters."),
	journal("kubelet.service", `I0301 12:00:00.123456    2140 kubelet.go:2437] "SyncLoop (PLEG): event for pod" pod="kube-system/coredns-5d78c9869d-x7k2p" event={"ID":"1f9e8d7c-6b5a-4938-2716-a5b4c3d2e1f0","Type":"ContainerStarted","Data":"9a8b7c6d5e4f"}`),
	journal("kubelet.service", `I0301 12:00:01.234567    2140 reconciler_common.go:258] "operationExecutor.VerifyControllerAttachedVolume started for volume \"kube-api-access-9xk2p\"" pod="default/web-0"`),
	journal("kubelet.service", `I0301 12:00:02.000000    2140 pod_startup_latency_tracker.go:102] "Observed pod startup duration" pod="default/web-1" podStartSLOduration=3.21 podStartE2EDuration="4.1s"`),
	journal("kubelet.service", `E0301 12:00:03.000000    2140 pod_workers.go:1298] "Error syncing pod, skipping" err="failed to \"StartContainer\" for \"app\" with CrashLoopBackOff" pod="default/web-2"`),
	journal("kubelet.service", `I0301 12:00:06.000000    2140 prober.go:107] "Probe failed" probeType="Startup" pod="default/web-3" podUID="0a1b2c3d" containerName="app" probeResult="failure"`),
	journal("containerd.service", `time="2026-03-01T12:00:04.123456789Z" level=info msg="StartContainer for \"4f3e2d1c0b9a\" returns successfully"`),
	journal("containerd.service", `time="2026-03-01T12:00:05.000000000Z" level=info msg="shim disconnected" id=4f3e2d1c0b9a namespace=k8s.io`),
	journal("containerd.service", `time="2026-03-01T12:00:05.100000000Z" level=info msg="ImageCreate event name:\"registry.k8s.io/pause:3.10\" labels:{key:\"io.cri-containerd.image\" value:\"managed\"}"`),
	systemd("init.scope", "Started cri-containerd-4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c.scope - libcontainer container 4f3e2d1c0b9a."),
	systemd("init.scope", "run-containerd-runc-k8s.io-4f3e2d1c0b9a-runc.Xy12Ab.mount: Deactivated successfully."),
	systemd("init.scope", `var-lib-kubelet-pods-1f9e8d7c\x2d6b5a-volumes-kubernetes.io\x7eprojected-kube\x2dapi\x2daccess\x2d9xk2p.mount: Deactivated successfully.`),
	journal("systemd-logind.service", "New session 42 of user core."),
	journal("sshd.service", "Accepted publickey for core from 10.0.0.5 port 52344 ssh2: ED25519 SHA256:q1w2e3r4t5y6u7i8o9p0a1s2d3f4g5h6j7k8l9z0x1c"),
	journal("chronyd.service", "Selected source 169.254.169.123 (time.example.internal)"),
}

// hitLines match the rules named with them.
var hitLines = []struct {
	line    logline.Line
	reasons []string
}{
	{kmsg("watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]"), []string{"SoftLockup"}},
	{kmsg("INFO: task java:4242 blocked for more than 120 seconds."), []string{"AppBlocked"}},
	{kmsg("BUG: kernel NULL pointer dereference, address: 0000000000000008"), []string{"KernelBug"}},
	{kmsg("python3[1234]: segfault at 0 ip 00007f3a2b1c0d9e sp 00007ffd5e4f3a20 error 4 in libc.so.6[7f3a2b000000+195000]"), []string{"AppCrash"}},
	{kmsg("Memory cgroup out of memory: Killed process 1234 (java) total-vm:8123456kB, anon-rss:4012345kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:9000kB oom_score_adj:985"), []string{"OOMKilling"}},
	{kmsg("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."), []string{"GPUXid"}},
	{kmsg("NVRM: GPU at PCI:0000:3b:00: GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d has fallen off the bus."), []string{"GPULost"}},
	{kmsg("nf_conntrack: nf_conntrack: table full, dropping packet"), []string{"ConntrackFull"}},
	{kmsg("I/O error, dev nvme0n1, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2"), []string{"DiskIOError"}},
	{kmsg("EXT4-fs error (device nvme0n1p1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0"), []string{"FilesystemError"}},
	{kmsg("nvme nvme0: I/O 42 QID 7 timeout, aborting"), []string{"NVMeTimeout"}},
	{kmsg("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1234 offset:0x0 grain:32)"), []string{"MemoryUE"}},
	{systemd("containerd.service", "containerd.service: Main process exited, code=killed, status=9/KILL"), []string{"ContainerRuntimeFailed"}},
	{systemd("kubelet.service", "kubelet.service: Failed with result 'exit-code'."), []string{"UnitFailed"}},
	{journal("kubelet.service", `I0301 12:00:07.000000    2140 prober.go:107] "Probe failed" probeType="Liveness" pod="default/web-0" podUID="0a1b2c3d" containerName="web" probeResult="failure" output="HTTP probe failed with statuscode: 500"`), []string{"LivenessProbeFailures"}},
	{journal("kubelet.service", `E0301 12:00:08.000000    2140 kubelet.go:2434] "Skipping pod synchronization" err="PLEG is not healthy: pleg was last seen active 3m5.123s ago; threshold is 3m0s"`), []string{"PLEGUnhealthy"}},
}
