package kernel

import (
	"slices"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func kmsg(text string) logline.Line { return monitortest.Kernel(text, t0) }

func journal(unit, text string) logline.Line { return monitortest.Unit(unit, text, t0) }

func systemd(unit, text string) logline.Line { return monitortest.Systemd(unit, text, t0) }

// ruleCase is one line and the findings the kernel monitor must make of it.
type ruleCase struct {
	name string
	line logline.Line
	// want is the expected findings; nil means the line must match nothing.
	want []detection.Finding
}

func finding(reason, subject, message string) []detection.Finding {
	return []detection.Finding{{Reason: reason, Subject: subject, Message: message, Observed: t0}}
}

var ruleCases = []ruleCase{
	// --- ForkFailedOutOfPIDs ---
	{
		name: "pids controller rejects a fork in containerd's cgroup",
		line: kmsg("cgroup: fork rejected by pids controller in /system.slice/containerd.service"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "/system.slice/containerd.service",
			"the pids controller rejected a fork in host cgroup /system.slice/containerd.service: host processes cannot create tasks"),
	},
	{
		name: "pids controller rejects a fork in the kubelet's cgroup",
		line: kmsg("cgroup: fork rejected by pids controller in /system.slice/kubelet.service"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "/system.slice/kubelet.service",
			"the pids controller rejected a fork in host cgroup /system.slice/kubelet.service: host processes cannot create tasks"),
	},
	{
		name: "a pod at its own pids limit, systemd cgroup driver, is not a node fault",
		line: kmsg("cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3f1c2b9a_8d4e_4c1a_9f0e_2b7d6c5a4e31.slice/cri-containerd-9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c.scope"),
	},
	{
		name: "a pod at its own pids limit, cgroupfs driver, is not a node fault",
		line: kmsg("cgroup: fork rejected by pids controller in /kubepods/besteffort/pod5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/4f3e2d1c0b9a"),
	},
	{
		name: "kubelet cannot exec mount",
		line: journal("kubelet.service", `E0314 09:26:53.123456    1034 mount_linux.go:282] "Mount failed" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`),
		want: finding(health.ReasonForkFailedOutOfPIDs, "kubelet.service",
			"kubelet.service: cannot fork: fork/exec /usr/bin/mount: resource temporarily unavailable"),
	},
	{
		name: "containerd cannot start runc init",
		line: journal("containerd.service", `time="2026-03-14T09:26:53.123456789Z" level=error msg="RunPodSandbox for &PodSandboxMetadata{Name:web-0,Namespace:default,} failed, error" error="failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: fork/exec /proc/self/exe: resource temporarily unavailable: unknown"`),
		want: finding(health.ReasonForkFailedOutOfPIDs, "containerd.service",
			"containerd.service: cannot fork: fork/exec /proc/self/exe: resource temporarily unavailable"),
	},
	{
		name: "the kubelet's Go runtime cannot create a thread",
		line: journal("kubelet.service", "runtime: failed to create new OS thread (have 11 already; errno=11)"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "kubelet.service",
			"kubelet.service: cannot create threads: runtime: failed to create new OS thread (have 11 already; errno=11, EAGAIN)"),
	},
	{
		name: "pthread_create fails in a host daemon",
		line: journal("crio.service", "conmon: pthread_create failed: Resource temporarily unavailable"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "crio.service",
			"crio.service: cannot create threads: pthread_create failed: Resource temporarily unavailable"),
	},
	{
		name: "systemd cannot fork a unit's process",
		line: systemd("kubelet.service", "kubelet.service: Failed to fork: Resource temporarily unavailable"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "kubelet.service",
			"kubelet.service: Failed to fork: Resource temporarily unavailable"),
	},
	{
		name: "systemd v255+ cannot spawn the executor",
		line: systemd("containerd.service", "containerd.service: Failed to spawn executor: Resource temporarily unavailable"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "containerd.service",
			"containerd.service: Failed to spawn executor: Resource temporarily unavailable"),
	},
	{
		name: "systemd cannot fork for itself",
		line: systemd("init.scope", "Failed to fork: Resource temporarily unavailable"),
		want: finding(health.ReasonForkFailedOutOfPIDs, "init.scope",
			"init.scope: Failed to fork: Resource temporarily unavailable"),
	},
	{
		name: "echo to /dev/kmsg is not the kernel",
		line: monitortest.Injected("cgroup: fork rejected by pids controller in /system.slice/kubelet.service", t0),
	},
	{
		name: "a user's logger -t kubelet is not the kubelet",
		line: monitortest.Forgeries(journal("kubelet.service", "runtime: failed to create new OS thread (have 11 already; errno=11)"))[2],
	},
	{
		name: "a workload unit's fork failure is its own business",
		line: journal("myapp.service", "fork/exec /bin/sh: resource temporarily unavailable"),
	},
	{
		name: "exec of a missing binary is not a fork failure",
		line: journal("kubelet.service", `E0314 09:26:53.123456    1034 mount_linux.go:282] "Mount failed" err="fork/exec /usr/bin/mount: no such file or directory"`),
	},
	{
		name: "thread creation refused by seccomp (EPERM) is not PID exhaustion",
		line: journal("kubelet.service", "runtime: failed to create new OS thread (have 2 already; errno=1)"),
	},
	{
		name: "journal-only fork patterns do not apply to kernel lines",
		line: kmsg("fork/exec /usr/bin/mount: resource temporarily unavailable"),
	},

	// --- SoftLockup ---
	{
		name: "soft lockup",
		line: kmsg("watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]"),
		want: finding(health.ReasonSoftLockup, "CPU#3", "CPU#3 stuck in kernel mode for 23s (running kworker/3:1, PID 123)"),
	},
	{
		name: "soft lockup, older NMI watchdog prefix",
		line: kmsg("NMI watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [java:4242]"),
		want: finding(health.ReasonSoftLockup, "CPU#0", "CPU#0 stuck in kernel mode for 22s (running java, PID 4242)"),
	},
	{
		name: "hard lockup is another report",
		line: kmsg("watchdog: Watchdog detected hard LOCKUP on cpu 5"),
	},
	{
		name: "RCU stall is another report",
		line: kmsg("rcu: INFO: rcu_sched self-detected stall on CPU"),
	},

	// --- AppBlocked ---
	{
		name: "hung task",
		line: kmsg("INFO: task java:4242 blocked for more than 120 seconds."),
		want: finding(health.ReasonAppBlocked, "java", "task java (PID 4242) blocked in uninterruptible sleep for more than 120s"),
	},
	{
		name: "hung kernel thread with slashes and dashes in its name",
		line: kmsg("INFO: task jbd2/nvme0n1p1-8:412 blocked for more than 245 seconds."),
		want: finding(health.ReasonAppBlocked, "jbd2/nvme0n1p1-8", "task jbd2/nvme0n1p1-8 (PID 412) blocked in uninterruptible sleep for more than 245s"),
	},
	{
		name: "hung task with a colon in its name",
		line: kmsg("INFO: task kworker/u16:3:8123 blocked for more than 122 seconds."),
		want: finding(health.ReasonAppBlocked, "kworker/u16:3", "task kworker/u16:3 (PID 8123) blocked in uninterruptible sleep for more than 122s"),
	},
	{
		name: "hung task report's follow-up line",
		line: kmsg(`"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.`),
	},
	{
		name: "hung task blocker line",
		line: kmsg("INFO: task java:4242 is blocked on a mutex likely owned by task kworker/0:1:12."),
	},

	// --- KernelBug ---
	{
		name: "BUG() assertion",
		line: kmsg("kernel BUG at mm/slub.c:123!"),
		want: finding(health.ReasonKernelBug, "", "kernel BUG at mm/slub.c:123"),
	},
	{
		name: "page fault in kernel mode",
		line: kmsg("BUG: unable to handle page fault for address: ffffa1b2c3d4e000"),
		want: finding(health.ReasonKernelBug, "", "BUG: unable to handle page fault for address: ffffa1b2c3d4e000"),
	},
	{
		name: "NULL pointer dereference",
		line: kmsg("BUG: kernel NULL pointer dereference, address: 0000000000000008"),
		want: finding(health.ReasonKernelBug, "", "BUG: kernel NULL pointer dereference, address: 0000000000000008"),
	},
	{
		name: "paging request, 4.x wording",
		line: kmsg("BUG: unable to handle kernel paging request at ffffffffc0a1b2c3"),
		want: finding(health.ReasonKernelBug, "", "BUG: unable to handle kernel paging request at ffffffffc0a1b2c3"),
	},
	{
		name: "oops",
		line: kmsg("Oops: 0002 [#1] PREEMPT SMP NOPTI"),
		want: finding(health.ReasonKernelBug, "", "Oops: 0002 [#1] PREEMPT SMP NOPTI"),
	},
	{
		name: "oops, 6.x wording",
		line: kmsg("Oops: Oops: 0000 [#1] SMP NOPTI"),
		want: finding(health.ReasonKernelBug, "", "Oops: Oops: 0000 [#1] SMP NOPTI"),
	},
	{
		name: "oops, arm64",
		line: kmsg("Internal error: Oops: 0000000096000004 [#1] PREEMPT SMP"),
		want: finding(health.ReasonKernelBug, "", "Internal error: Oops: 0000000096000004 [#1] PREEMPT SMP"),
	},
	{
		name: "general protection fault in kernel mode",
		line: kmsg("general protection fault: 0000 [#1] SMP PTI"),
		want: finding(health.ReasonKernelBug, "", "general protection fault: 0000 [#1] SMP PTI"),
	},
	{
		name: "a driver mentioning a firmware bug is not a kernel BUG",
		line: kmsg(`ACPI BIOS Error (bug): Could not resolve symbol [\_SB.PCI0.LPCB.HEC.ECAV], AE_NOT_FOUND (20230628/psargs-330)`),
	},
	{
		name: "BUG: in the middle of a driver message is not a kernel report",
		line: kmsg("i915 0000:00:02.0: [drm] *ERROR* GT0: BUG: engine reset failed"),
	},

	// --- AppCrash ---
	{
		name: "segfault",
		line: kmsg("python3[1234]: segfault at 0 ip 00007f3a5c1d2e4f sp 00007ffd4b3c2a10 error 4 in libpython3.10.so.1.0[7f3a5c000000+2b5000] likely on CPU 3 (core 3, socket 0)"),
		want: finding(health.ReasonAppCrash, "python3", "python3 (PID 1234) crashed: segfault at address 0x0"),
	},
	{
		name: "segfault of a process whose name has a space",
		line: kmsg("Web Content[5123]: segfault at 7f0000001000 ip 00007f1e2d3c4b5a sp 00007ffc9a8b7c60 error 6 in libxul.so[7f1e2a000000+5c21000]"),
		want: finding(health.ReasonAppCrash, "Web Content", "Web Content (PID 5123) crashed: segfault at address 0x7f0000001000"),
	},
	{
		name: "general protection fault in user space",
		line: kmsg("traps: node[777] general protection fault ip:55d0c3a1b2c3 sp:7ffd0e1f2a30 error:0 in node[55d0c2e00000+4a00000]"),
		want: finding(health.ReasonAppCrash, "node", "node (PID 777) crashed: general protection fault"),
	},
	{
		name: "divide error",
		line: kmsg("traps: app[99] trap divide error ip:401136 sp:7ffc1e2f3a40 error:0 in app[401000+1000]"),
		want: finding(health.ReasonAppCrash, "app", "app (PID 99) crashed: trap divide error"),
	},
	{
		name: "kernel-internal traps message",
		line: kmsg("traps: Missing ENDBR: sched_clock_noinstr+0x0/0x20"),
	},

	// --- OOMKilling ---
	{
		name: "global OOM kill",
		line: kmsg("Out of memory: Killed process 1234 (java) total-vm:8123456kB, anon-rss:4012345kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:9876kB oom_score_adj:0"),
		want: finding(health.ReasonOOMKilling, "java", "Out of memory: killed process 1234 (java), anon-rss 4012345kB"),
	},
	{
		name: "memory cgroup OOM kill",
		line: kmsg("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:2345678kB, anon-rss:1048576kB, file-rss:12345kB, shmem-rss:0kB, UID:0 pgtables:2345kB oom_score_adj:936"),
		want: finding(health.ReasonOOMKilling, "python3", "Memory cgroup out of memory: killed process 4242 (python3), anon-rss 1048576kB"),
	},
	{
		name: "OOM kill, before 4.19",
		line: kmsg("Killed process 1234 (java) total-vm:8123456kB, anon-rss:4012345kB, file-rss:0kB, shmem-rss:0kB"),
		want: finding(health.ReasonOOMKilling, "java", "OOM killer: killed process 1234 (java), anon-rss 4012345kB"),
	},
	{
		name: "OOM victim selection, before 4.19 (the kill line follows)",
		line: kmsg("Out of memory: Kill process 1234 (java) score 900 or sacrifice child"),
	},
	{
		name: "OOM reaper",
		line: kmsg("oom_reaper: reaped process 1234 (java), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"),
	},
	{
		name: "OOM killer invocation header",
		line: kmsg("java invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0"),
	},

	// --- ConntrackExceededKernel ---
	{
		name: "conntrack table full, doubled prefix",
		line: kmsg("nf_conntrack: nf_conntrack: table full, dropping packet"),
		want: finding(health.ReasonConntrackExceededKernel, "",
			"connection tracking table full: the kernel drops packets of new connections (net.netfilter.nf_conntrack_max)"),
	},
	{
		name: "conntrack table full, older kernels",
		line: kmsg("nf_conntrack: table full, dropping packet."),
		want: finding(health.ReasonConntrackExceededKernel, "",
			"connection tracking table full: the kernel drops packets of new connections (net.netfilter.nf_conntrack_max)"),
	},
	{
		name: "conntrack expectation table",
		line: kmsg("nf_conntrack: expectation table full"),
	},
	{
		name: "rate limiter summary",
		line: kmsg("net_ratelimit: 3939 callbacks suppressed"),
	},
}

func newTestMonitor(t testing.TB) *Monitor {
	return New(detection.Env{HostRoot: t.TempDir()}, Options{Timex: fixedTimex{}})
}

func interpretAll(m *Monitor, mt *rules.Matcher, line logline.Line) []detection.Finding {
	var got []detection.Finding
	mt.Match(line, func(match logline.Match) { got = append(got, m.Interpret(match)...) })
	return got
}

func TestRules(t *testing.T) {
	m := newTestMonitor(t)
	mt, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			got := interpretAll(m, mt, tc.line)
			if !slices.Equal(got, tc.want) {
				t.Errorf("line %q\n got %+v\nwant %+v", tc.line.Text, got, tc.want)
			}
		})
	}
}

// TestEveryRuleHasAPositiveCase keeps ruleCases honest: each rule, compiled
// alone, matches at least one of the expected-positive lines.
func TestEveryRuleHasAPositiveCase(t *testing.T) {
	var positives []logline.Line
	for _, tc := range ruleCases {
		if tc.want != nil {
			positives = append(positives, tc.line)
		}
	}
	positives = append(positives, cronStart("cron.service", "root", "/usr/local/bin/sync", t0))
	monitortest.EveryRuleMatches(t, Rules(), positives)
	monitortest.NoForgeryMatches(t, Rules(), positives)
}

// cronStart is cron's journal line for a job start, as Debian's cron (CRON)
// and cronie (CROND) log it: from the daemon, as root.
func cronStart(unit, user, command string, at time.Time) logline.Line {
	return monitortest.Unit(unit, "("+user+") CMD ("+command+")", at)
}

func TestRapidCron(t *testing.T) {
	type start struct {
		unit, user, cmd string
		after           time.Duration // since t0
	}
	for _, tc := range []struct {
		name   string
		starts []start
		thr    float64
		want   []string // the findings' messages
	}{
		{
			name:   "hourly run-parts is not rapid",
			starts: []start{{"cron.service", "root", "   cd / && run-parts --report /etc/cron.hourly", 0}, {"cron.service", "root", "   cd / && run-parts --report /etc/cron.hourly", time.Hour}},
		},
		{
			name: "every five minutes is not faster than every five minutes, even a few ms early",
			starts: []start{{"crond.service", "root", "/opt/bin/collect.sh", 0}, {"crond.service", "root", "/opt/bin/collect.sh", 5*time.Minute - 20*time.Millisecond},
				{"crond.service", "root", "/opt/bin/collect.sh", 10 * time.Minute}},
		},
		{
			name:   "every minute is",
			starts: []start{{"crond.service", "ec2-user", "/opt/bin/scrape.sh >/dev/null 2>&1", 0}, {"crond.service", "ec2-user", "/opt/bin/scrape.sh >/dev/null 2>&1", time.Minute + 3*time.Millisecond}},
			want:   []string{"cron job of ec2-user runs every 1m0s, more often than every 5m0s: /opt/bin/scrape.sh >/dev/null 2>&1"},
		},
		{
			name: "jobs are told apart by user and command; a job in a session scope counts",
			starts: []start{{"cron.service", "root", "/bin/a", 0}, {"cron.service", "root", "/bin/b", time.Minute},
				{"cron.service", "alice", "/bin/a", 2 * time.Minute}, {"session-c42.scope", "root", "/bin/a", 4 * time.Minute}},
			want: []string{"cron job of root runs every 4m0s, more often than every 5m0s: /bin/a"},
		},
		{
			name:   "a replayed line is not a second run",
			starts: []start{{"cron.service", "root", "/bin/a", 0}, {"cron.service", "root", "/bin/a", 0}, {"cron.service", "root", "/bin/a", -time.Minute}},
		},
		{
			name:   "configured threshold",
			starts: []start{{"cron.service", "root", "/bin/a", 0}, {"cron.service", "root", "/bin/a", 10 * time.Minute}},
			thr:    900,
			want:   []string{"cron job of root runs every 10m0s, more often than every 15m0s: /bin/a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonRapidCron] = tc.thr
			}
			m := newHostMonitor(hostroot.New(t), thr, fixedTimex{})
			mt, err := rules.Compile(m.Rules())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range tc.starts {
				for _, f := range interpretAll(m, mt, cronStart(st.unit, st.user, st.cmd, t0.Add(st.after))) {
					if f.Reason != health.ReasonRapidCron || f.Subject != st.user+": "+st.cmd || !f.Observed.Equal(t0.Add(st.after)) {
						t.Errorf("finding %+v", f)
					}
					got = append(got, f.Message)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings\n got %q\nwant %q", got, tc.want)
			}
		})
	}
	// Not job starts: cronie's output and end lines, other daemons' lines.
	m := newTestMonitor(t)
	mt, _ := rules.Compile(m.Rules())
	for _, text := range []string{"(root) CMDOUT (backup done)", "(root) CMDEND (/opt/bin/backup.sh)", "(CRON) INFO (pidfile fd = 3)",
		"pam_unix(crond:session): session opened for user root(uid=0) by (uid=0)", "exec (root) CMD (/bin/a) failed"} {
		line := monitortest.Unit("crond.service", text, t0)
		for range 2 {
			if got := interpretAll(m, mt, line); len(got) != 0 {
				t.Errorf("%q: %v", text, got)
			}
		}
	}
}

func TestRuleReasonsAreKernelReady(t *testing.T) {
	for _, r := range Rules() {
		reg, ok := health.LookupReason(r.Reason)
		if !ok {
			t.Errorf("rule reason %q is not in the registry", r.Reason)
			continue
		}
		if reg.Condition != health.KernelReady || reg.Source != health.FromLog {
			t.Errorf("rule reason %q: condition %s source %s, want KernelReady log", r.Reason, reg.Condition, reg.Source)
		}
	}
}

func TestMonitorName(t *testing.T) {
	mon, ok := health.LookupMonitor(Name)
	if !ok || mon.Condition != health.KernelReady {
		t.Fatalf("registry monitor %q = %+v, %v; want KernelReady", Name, mon, ok)
	}
	if got := newTestMonitor(t).Name(); got != Name {
		t.Fatalf("Name() = %q", got)
	}
}

// A host daemon's fork failure is a node fault unless the pods hold most
// of the node's tasks when it is read: then a pod exhausted the node's
// PIDs (a tenant's fork bomb without podPidsLimit), a Warning, whichever
// cgroup driver and version the node runs. The kernel's own pids line for
// a host cgroup is not judged: the pods cannot put tasks there.
func TestForkFailureWhilePodsHoldTheTasksIsTheWorkloads(t *testing.T) {
	kubelet := journal("kubelet.service", `E0314 09:26:53.123456    1034 mount_linux.go:282] "Mount failed" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`)
	hostCgroup := kmsg("cgroup: fork rejected by pids controller in /system.slice/kubelet.service")
	for _, tc := range []struct {
		name     string
		pidsFile string // relative to the host root; "" writes none
		pods     string
		line     logline.Line
		want     string
	}{
		{"cgroup v2, systemd driver, pods hold most", "sys/fs/cgroup/kubepods.slice/pids.current", "4190000", kubelet, health.ReasonPodsExhaustedPIDs},
		{"cgroup v2, cgroupfs driver, pods hold most", "sys/fs/cgroup/kubepods/pids.current", "4190000", kubelet, health.ReasonPodsExhaustedPIDs},
		{"cgroup v1, systemd driver, pods hold most", "sys/fs/cgroup/pids/kubepods.slice/pids.current", "4190000\n", kubelet, health.ReasonPodsExhaustedPIDs},
		{"cgroup v1, cgroupfs driver, pods hold most", "sys/fs/cgroup/pids/kubepods/pids.current", "4190000", kubelet, health.ReasonPodsExhaustedPIDs},
		{"pods hold few: the host's own failure", "sys/fs/cgroup/kubepods.slice/pids.current", "1200", kubelet, health.ReasonForkFailedOutOfPIDs},
		{"exactly half is not most", "sys/fs/cgroup/kubepods.slice/pids.current", "2097152", kubelet, health.ReasonForkFailedOutOfPIDs},
		{"no pids controller to ask: a node fault", "", "", kubelet, health.ReasonForkFailedOutOfPIDs},
		{"an unreadable count: a node fault", "sys/fs/cgroup/kubepods.slice/pids.current", "max", kubelet, health.ReasonForkFailedOutOfPIDs},
		{"the kernel's line for a host cgroup is not judged", "sys/fs/cgroup/kubepods.slice/pids.current", "4190000", hostCgroup, health.ReasonForkFailedOutOfPIDs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithProc()
			root.WriteFile("proc/loadavg", "80.00 75.00 70.00 9/4194304 4194300\n")
			if tc.pidsFile != "" {
				root.WriteFile(tc.pidsFile, tc.pods)
			}
			m := New(detection.Env{HostRoot: root.Path("")}, Options{Timex: fixedTimex{}})
			mt, err := rules.Compile(m.Rules())
			if err != nil {
				t.Fatal(err)
			}
			got := interpretAll(m, mt, tc.line)
			if len(got) != 1 || got[0].Reason != tc.want {
				t.Fatalf("findings %+v, want one %s", got, tc.want)
			}
			if r, _ := health.LookupReason(got[0].Reason); tc.want == health.ReasonPodsExhaustedPIDs &&
				(r.Severity != health.Warning || !strings.Contains(got[0].Message, "pods hold 4190000 of the node's 4194304 tasks")) {
				t.Errorf("%s is %s, message %q", got[0].Reason, r.Severity, got[0].Message)
			}
		})
	}
}
