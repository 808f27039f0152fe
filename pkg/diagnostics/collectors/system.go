package collectors

import (
	"context"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catSystem = "system"

// journalUnits are the units whose journal goes into every bundle.
func journalUnits() []string {
	return []string{"kubelet", "containerd", "crio", "docker", "nodemend-agent"}
}

// system lists the system category's collectors; those made here live in a
// file of its own: journal.go, processes.go, sysctl.go, cgroups.go.
func system(e *Env) []collect.Collector {
	var cs []collect.Collector
	for _, u := range journalUnits() {
		cs = append(cs, collect.Collector{Name: "system/journal-" + u, Category: catSystem, Timeout: time.Minute,
			Run: func(ctx context.Context, out *collect.Output) error {
				return e.journal(ctx, out, "journal/"+u+".log", "--unit="+u+".service")
			}})
	}
	cs = append(cs,
		collect.Collector{Name: "system/journal-warnings", Category: catSystem, Timeout: time.Minute,
			Run: func(ctx context.Context, out *collect.Output) error {
				return e.journal(ctx, out, "journal/warnings.log", "--priority=warning")
			}},
		// Simulated hosts keep their journal as JSON lines (hostroot.JournalFixture).
		filesCollector(e, catSystem, "journal-files", e.tail(), "var/log/journal/*.jsonl"),
		filesCollectorExcept(e, catSystem, "logs", e.tail(), []string{"var/log/kern.log"}, // kernel/logs has it
			"var/log/syslog", "var/log/syslog.1", "var/log/messages", "var/log/messages.1", "var/log/cron", "var/log/*.log"),
		podLogs(e),
		collect.Collector{Name: "system/processes", Category: catSystem, Run: e.processes},
		daemonLogs(e),
		collect.Collector{Name: "system/sysctl", Category: catSystem, Run: e.sysctl},
		filesCollector(e, catSystem, "pressure", 0, "proc/pressure/cpu", "proc/pressure/memory", "proc/pressure/io",
			"proc/pressure/irq", "proc/vmstat", "proc/stat", "proc/sys/fs/file-nr", "proc/sys/kernel/pid_max",
			"proc/sys/kernel/threads-max"),
		collect.Collector{Name: "system/cgroups", Category: catSystem, Run: e.cgroups},
	)
	return append(cs, nodeBootstrap(e)...)
}
