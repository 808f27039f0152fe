package kernel

import (
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

var (
	kmsgOnly    = []logline.Source{logline.Kmsg}
	journalOnly = []logline.Source{logline.Journal}
	// byKernel: the kernel's own records; a user-space write to /dev/kmsg
	// never passes for one.
	byKernel = []logline.Provenance{logline.ByKernel}
)

// hostDaemons are the writers whose failure to fork is a node problem: the
// processes of the kubelet's and the container runtimes' units, and systemd
// itself (PID 1, in init.scope; its messages about one of these units are
// that unit's), by their trusted _SYSTEMD_UNIT. A workload's own fork
// failures are its problem and are not matched, and no process can claim
// one of these units by its SYSLOG_IDENTIFIER or UNIT (logger -t kubelet).
var hostDaemons = logline.ByUnits(
	"kubelet.service",
	"containerd.service",
	"crio.service",
	"docker.service",
	"init.scope",
)

// Rules returns the kernel monitor's log rules. Message formats are those of
// the kernel source files named in each comment (as of Linux 4.14 through 6.x)
// and of the Go runtime and glibc for the journal rules.
func Rules() []logline.Rule {
	return []logline.Rule{
		// --- ForkFailedOutOfPIDs (Fatal) -------------------------------------
		// kernel/cgroup/pids.c pids_event(), printed once per cgroup:
		//   "cgroup: fork rejected by pids controller in /system.slice/containerd.service"
		// The path is the forking task's cgroup. A pod reaching its own
		// pids.max (/kubepods..., cgroupfs or systemd driver) is the workload's
		// business: excluded.
		{
			Reason:   health.ReasonForkFailedOutOfPIDs,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"fork rejected by pids controller in "},
			Pattern:  `fork rejected by pids controller in (?P<cgroup>/\S*)`,
			Exclude:  []string{"controller in /kubepods"},
			Message:  "the pids controller rejected a fork in host cgroup ${cgroup}: host processes cannot create tasks",
		},
		// Go os/exec (kubelet, containerd, runc) when clone fails with EAGAIN:
		//   `... err="fork/exec /usr/bin/mount: resource temporarily unavailable"`
		{
			Reason:   health.ReasonForkFailedOutOfPIDs,
			Sources:  journalOnly,
			Accept:   hostDaemons,
			Contains: []string{"fork/exec ", ": resource temporarily unavailable"},
			Pattern:  `fork/exec (?P<path>[^:"\s]+): resource temporarily unavailable`,
			Message:  "cannot fork: fork/exec ${path}: resource temporarily unavailable",
		},
		// Go runtime newosproc (runtime/os_linux.go), errno 11 = EAGAIN:
		//   "runtime: failed to create new OS thread (have 11 already; errno=11)"
		{
			Reason:   health.ReasonForkFailedOutOfPIDs,
			Sources:  journalOnly,
			Accept:   hostDaemons,
			Contains: []string{"runtime: failed to create new OS thread"},
			Pattern:  `runtime: failed to create new OS thread \(have (?P<have>\d+) already; errno=11\)`,
			Message:  "cannot create threads: runtime: failed to create new OS thread (have ${have} already; errno=11, EAGAIN)",
		},
		// C/C++ daemons: "pthread_create failed: Resource temporarily unavailable"
		// (strerror(EAGAIN)); the JVM writes "pthread_create failed (EAGAIN)".
		{
			Reason:   health.ReasonForkFailedOutOfPIDs,
			Sources:  journalOnly,
			Accept:   hostDaemons,
			Contains: []string{"pthread_create failed"},
			Pattern:  `pthread_create failed(?::? \(EAGAIN\)|: [Rr]esource temporarily unavailable)`,
			Message:  "cannot create threads: pthread_create failed: Resource temporarily unavailable",
		},
		// systemd PID 1 (src/core/execute.c, log_unit_error) when it cannot start
		// a unit's process; v255+ spawns an executor first:
		//   "kubelet.service: Failed to fork: Resource temporarily unavailable"
		//   "kubelet.service: Failed to spawn executor: Resource temporarily unavailable"
		{
			Reason:   health.ReasonForkFailedOutOfPIDs,
			Sources:  journalOnly,
			Accept:   hostDaemons,
			Contains: []string{"Failed to ", ": Resource temporarily unavailable"},
			Pattern:  `Failed to (?:fork|spawn executor)[^:]*: Resource temporarily unavailable`,
		},

		// --- SoftLockup ------------------------------------------------------
		// kernel/watchdog.c watchdog_timer_fn(), pr_fmt "watchdog: " (older
		// kernels: no prefix, or "NMI watchdog: "):
		//   "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]"
		{
			Reason:   health.ReasonSoftLockup,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"BUG: soft lockup - CPU#"},
			Pattern:  `BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s! \[(?P<comm>.*):(?P<pid>\d+)\]`,
			Message:  "CPU#${cpu} stuck in kernel mode for ${secs}s (running ${comm}, PID ${pid})",
		},

		// --- AppBlocked ------------------------------------------------------
		// kernel/hung_task.c check_hung_task() (6.x may append " [Warning #N]"):
		//   "INFO: task java:4242 blocked for more than 120 seconds."
		{
			Reason:   health.ReasonAppBlocked,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"INFO: task ", " blocked for more than "},
			Pattern:  `INFO: task (?P<comm>.+):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds`,
			Message:  "task ${comm} (PID ${pid}) blocked in uninterruptible sleep for more than ${secs}s",
		},

		// --- KernelBug -------------------------------------------------------
		// lib/bug.c report_bug(): "kernel BUG at mm/slub.c:123!"
		{
			Reason:   health.ReasonKernelBug,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"kernel BUG at "},
			Pattern:  `kernel BUG at (?P<where>\S+:\d+)!`,
			Message:  "kernel BUG at ${where}",
		},
		// "BUG: " reports: arch/x86/mm/fault.c "BUG: unable to handle page fault
		// for address: ...", "BUG: kernel NULL pointer dereference, address: ...",
		// older "BUG: unable to handle kernel paging request at ...", and
		// mm/page_alloc.c "BUG: Bad page state in process ...", etc. The soft
		// lockup report is its own reason.
		{
			Reason:   health.ReasonKernelBug,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"BUG: "},
			Pattern:  `^BUG: \S`,
			Exclude:  []string{"BUG: soft lockup"},
		},
		// arch/x86/kernel/dumpstack.c __die_header(): "Oops: 0002 [#1] SMP NOPTI",
		// since 6.x "Oops: Oops: 0000 [#1] ..." or "Oops: general protection
		// fault, ...: 0000 [#1] ..."; arm64 die(): "Internal error: Oops: ...".
		{
			Reason:   health.ReasonKernelBug,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"Oops: "},
			Pattern:  `^(?:Internal error: )?Oops: `,
		},
		// x86 before 6.x, a general protection fault in kernel mode (the die
		// counter "[#N]" tells it from the user-space "traps:" report):
		//   "general protection fault: 0000 [#1] SMP PTI"
		{
			Reason:   health.ReasonKernelBug,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"general protection fault", "[#"},
			Pattern:  `^general protection fault\b.*\[#\d+\]`,
		},

		// --- AppCrash --------------------------------------------------------
		// arch/x86/mm/fault.c show_signal_msg():
		//   "python3[1234]: segfault at 0 ip 00007f... sp 00007ffd... error 4 in libc.so.6[...]"
		{
			Reason:   health.ReasonAppCrash,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"]: segfault at "},
			Pattern:  `^(?P<comm>.+)\[(?P<pid>\d+)\]: segfault at (?P<addr>[0-9a-f]+) ip `,
			Message:  "${comm} (PID ${pid}) crashed: segfault at address 0x${addr}",
		},
		// arch/x86/kernel/traps.c show_signal(), pr_fmt "traps: ":
		//   "traps: node[777] general protection fault ip:7f0c sp:7ffd error:0 in node[...]"
		//   "traps: app[99] trap divide error ip:... sp:... error:0 in app[...]"
		{
			Reason:   health.ReasonAppCrash,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"traps: ", " ip:"},
			Pattern:  `^traps: (?P<comm>.+)\[(?P<pid>\d+)\] (?P<what>.+?) ip:[0-9a-f]+ sp:`,
			Message:  "${comm} (PID ${pid}) crashed: ${what}",
		},

		// --- OOMKilling ------------------------------------------------------
		// mm/oom_kill.c __oom_kill_process() (4.19+), message "Out of memory"
		// or "Memory cgroup out of memory" (the literal covers both cases of "O"):
		//   "Out of memory: Killed process 1234 (java) total-vm:8123456kB, anon-rss:4012345kB, ..."
		{
			Reason:   health.ReasonOOMKilling,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"ut of memory: Killed process "},
			Pattern:  `(?P<kind>Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+) \((?P<comm>.+?)\) total-vm:\d+kB, anon-rss:(?P<anon>\d+)kB`,
			Message:  "${kind}: killed process ${pid} (${comm}), anon-rss ${anon}kB",
		},
		// Before 4.19 the kill is its own line after "Out of memory: Kill
		// process N (comm) score S or sacrifice child":
		//   "Killed process 1234 (java) total-vm:8123456kB, anon-rss:4012345kB, file-rss:0kB"
		{
			Reason:   health.ReasonOOMKilling,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"Killed process "},
			Pattern:  `^Killed process (?P<pid>\d+) \((?P<comm>.+?)\) total-vm:\d+kB, anon-rss:(?P<anon>\d+)kB`,
			Message:  "OOM killer: killed process ${pid} (${comm}), anon-rss ${anon}kB",
		},

		// --- RapidCron (Interpret keeps the last start of each job) ----------
		// Cron logs every job it starts through syslog, identifier CRON
		// (Debian's cron, src do_command.c) or CROND (cronie, src/do_command.c):
		//   "(root) CMD (   cd / && run-parts --report /etc/cron.hourly)"
		//   "(ec2-user) CMD (/opt/bin/collect.sh >/dev/null 2>&1)"
		// The journal unit is cron.service or crond.service, or the job's
		// session scope where PAM opens one; the pattern is tight instead,
		// and the writer is root: both crons log the start from the forked
		// daemon before it changes to the job's user (cronie
		// do_command.c child_process, Debian cron likewise). cronie's CMDOUT
		// and CMDEND lines are not starts.
		{
			Reason:   health.ReasonRapidCron,
			Sources:  journalOnly,
			Accept:   []logline.Provenance{logline.ByRoot},
			Contains: []string{") CMD ("},
			Pattern:  `^\((?P<user>[^()\s]+)\) CMD \((?P<cmd>.*)\)$`,
		},

		// --- ConntrackExceededKernel -----------------------------------------
		// net/netfilter/nf_conntrack_core.c: "nf_conntrack: table full, dropping
		// packet" with pr_fmt "nf_conntrack: " on newer kernels, so the prefix
		// appears once or twice; older kernels end with a period.
		{
			Reason:   health.ReasonConntrackExceededKernel,
			Sources:  kmsgOnly,
			Accept:   byKernel,
			Contains: []string{"nf_conntrack: table full, dropping packet"},
			Message:  "connection tracking table full: the kernel drops packets of new connections (net.netfilter.nf_conntrack_max)",
		},
	}
}
