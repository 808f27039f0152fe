package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catSystem = "system"

// journalUnits are the units whose journal goes into every bundle.
func journalUnits() []string {
	return []string{"kubelet", "containerd", "crio", "docker", "nodemend-agent"}
}

// daemons whose environment is kept (redacted): how they were started is
// often the answer.
func envDaemons() map[string]bool {
	return map[string]bool{"kubelet": true, "containerd": true, "dockerd": true, "crio": true, "nodemend-agent": true}
}

func system(e *Env) []collect.Collector {
	var cs []collect.Collector
	for _, u := range journalUnits() {
		cs = append(cs, collect.Collector{Name: "system/journal-" + u, Category: catSystem, Timeout: time.Minute,
			Run: func(ctx context.Context, out *collect.Output) error {
				return runTool(ctx, e, out, "journal/"+u+".log", "journalctl", e.journalArgs("--unit="+u+".service")...)
			}})
	}
	cs = append(cs,
		collect.Collector{Name: "system/journal-warnings", Category: catSystem, Timeout: time.Minute,
			Run: func(ctx context.Context, out *collect.Output) error {
				return runTool(ctx, e, out, "journal/warnings.log", "journalctl", e.journalArgs("--priority=warning")...)
			}},
		// Simulated hosts keep their journal as JSON lines (hostroot.JournalFixture).
		filesCollector(e, catSystem, "journal-files", e.tail(), "var/log/journal/*.jsonl"),
		filesCollectorExcept(e, catSystem, "logs", e.tail(), []string{"var/log/kern.log"}, // kernel/logs has it
			"var/log/syslog", "var/log/syslog.1", "var/log/messages", "var/log/messages.1", "var/log/*.log"),
		collect.Collector{Name: "system/processes", Category: catSystem, Run: e.processes},
		collect.Collector{Name: "system/sysctl", Category: catSystem, Run: e.sysctl},
		filesCollector(e, catSystem, "pressure", 0, "proc/pressure/cpu", "proc/pressure/memory", "proc/pressure/io",
			"proc/pressure/irq", "proc/vmstat", "proc/stat", "proc/sys/fs/file-nr", "proc/sys/kernel/pid_max",
			"proc/sys/kernel/threads-max"),
		collect.Collector{Name: "system/cgroups", Category: catSystem, Run: e.cgroups},
	)
	return cs
}

// journalArgs reads the host's journal (under the host root) from Since on,
// newest 100,000 lines at most, with precise timestamps.
func (e *Env) journalArgs(filter ...string) []string {
	args := []string{"--no-pager", "--output=short-iso-precise", "--lines=100000",
		"--since=@" + strconv.FormatInt(e.Since.Unix(), 10)}
	if root := filepath.Clean(e.HostRoot); root != "/" {
		args = append(args, "--root="+root)
	}
	return append(args, filter...)
}

// proc is one process of /proc.
type proc struct {
	pid, ppid int
	comm      string
	state     string
	rssPages  int64
	threads   int
	cmdline   string
}

// parseProcStat reads /proc/<pid>/stat: "pid (comm) state ppid ...". comm
// may hold spaces and parentheses: it ends at the last ')'.
func parseProcStat(s string) (proc, bool) {
	open := strings.IndexByte(s, '(')
	cl := strings.LastIndexByte(s, ')')
	if open < 0 || cl < open {
		return proc{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return proc{}, false
	}
	f := strings.Fields(s[cl+1:])
	// f[0] is field 3 (state); threads is field 20, rss field 24.
	if len(f) < 22 {
		return proc{}, false
	}
	p := proc{pid: pid, comm: s[open+1 : cl], state: f[0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.threads, _ = strconv.Atoi(f[17])
	p.rssPages, _ = strconv.ParseInt(f[21], 10, 64)
	return p, true
}

// formatProcesses renders processes sorted by pid.
func formatProcesses(ps []proc) []byte {
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	rows := make([][]string, 0, len(ps))
	for _, p := range ps {
		cmd := p.cmdline
		if cmd == "" {
			cmd = "[" + p.comm + "]"
		}
		rows = append(rows, []string{strconv.Itoa(p.pid), strconv.Itoa(p.ppid), p.state, strconv.Itoa(p.threads),
			strconv.FormatInt(p.rssPages*4, 10), p.comm, cmd})
	}
	return table([]string{"PID", "PPID", "S", "THREADS", "RSS_KIB", "COMM", "COMMAND"}, rows)
}

func (e *Env) processes(ctx context.Context, out *collect.Output) error {
	entries, err := os.ReadDir(e.hostPath("proc"))
	if err != nil {
		return err
	}
	var ps []proc
	daemons := envDaemons()
	for _, de := range entries {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := strconv.Atoi(de.Name()); err != nil {
			continue
		}
		dir := "proc/" + de.Name() + "/"
		stat, err := e.readHost(dir + "stat")
		if err != nil {
			continue // gone since the listing
		}
		p, ok := parseProcStat(stat)
		if !ok {
			continue
		}
		if cl, err := os.ReadFile(e.hostPath(dir + "cmdline")); err == nil {
			p.cmdline = strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '})))
		}
		ps = append(ps, p)
		if daemons[p.comm] {
			if env, err := os.ReadFile(e.hostPath(dir + "environ")); err == nil {
				data := bytes.ReplaceAll(bytes.TrimRight(env, "\x00"), []byte{0}, []byte{'\n'})
				if err := out.WriteFile(fmt.Sprintf("environ/%s-%d.env", p.comm, p.pid), append(data, '\n')); err != nil {
					return err
				}
			}
		}
	}
	// Command lines too are redacted: "--token=..." is common.
	return out.WriteFile("processes.txt", formatProcesses(ps))
}

// sysctlLimit bounds the walk of /proc/sys (a few thousand on real hosts;
// many interfaces multiply net.*).
const sysctlLimit = 20000

func (e *Env) sysctl(ctx context.Context, out *collect.Output) error {
	root := e.hostPath("proc/sys")
	var lines []string
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			return nil
		}
		if n++; n > sysctlLimit {
			return fs.SkipAll
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil // write-only or not permitted
		}
		rel, _ := filepath.Rel(root, path)
		key := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		val := strings.Join(strings.Fields(string(data)), " ")
		lines = append(lines, key+" = "+val)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(lines)
	return out.WriteFile("sysctl.txt", []byte(strings.Join(lines, "\n")+"\n"))
}

// throttle is one cgroup's CPU throttling.
type throttle struct {
	cgroup               string
	periods, throttled   int64
	throttledUsec        int64
	oomKills, memoryHigh int64
}

// parseCPUStat reads cpu.stat: cgroup v2 (nr_periods, nr_throttled,
// throttled_usec) or v1 (throttled_time in ns).
func parseCPUStat(s string) (periods, throttled, throttledUsec int64) {
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		case "throttled_usec":
			throttledUsec = n
		case "throttled_time":
			throttledUsec = n / 1000
		}
	}
	return periods, throttled, throttledUsec
}

// parseMemoryEvents reads memory.events (v2): oom_kill and high counts.
func parseMemoryEvents(s string) (oomKills, high int64) {
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "oom_kill":
			oomKills = n
		case "high":
			high = n
		}
	}
	return oomKills, high
}

// formatThrottling lists the throttled and OOM-killing cgroups, worst first
// (at most top).
func formatThrottling(ts []throttle, top int) []byte {
	var hit []throttle
	for _, t := range ts {
		if t.throttled > 0 || t.oomKills > 0 {
			hit = append(hit, t)
		}
	}
	sort.Slice(hit, func(i, j int) bool {
		if hit[i].throttledUsec != hit[j].throttledUsec {
			return hit[i].throttledUsec > hit[j].throttledUsec
		}
		return hit[i].cgroup < hit[j].cgroup
	})
	if len(hit) > top {
		hit = hit[:top]
	}
	rows := make([][]string, 0, len(hit))
	for _, t := range hit {
		pct := "-"
		if t.periods > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*float64(t.throttled)/float64(t.periods))
		}
		rows = append(rows, []string{t.cgroup, strconv.FormatInt(t.throttled, 10), strconv.FormatInt(t.periods, 10), pct,
			(time.Duration(t.throttledUsec) * time.Microsecond).String(), strconv.FormatInt(t.oomKills, 10)})
	}
	return table([]string{"CGROUP", "THROTTLED", "PERIODS", "RATIO", "THROTTLED_TIME", "OOM_KILLS"}, rows)
}

// cgroupLimit bounds the cgroup walk (kubepods on a dense node: thousands).
const cgroupLimit = 20000

func (e *Env) cgroups(ctx context.Context, out *collect.Output) error {
	root := e.hostPath("sys/fs/cgroup")
	if _, err := os.Stat(root); err != nil {
		return collect.Skip("no /sys/fs/cgroup")
	}
	var ts []throttle
	dirs := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.IsDir() {
			return nil
		}
		if dirs++; dirs > cgroupLimit {
			return fs.SkipAll
		}
		stat, err := os.ReadFile(filepath.Join(path, "cpu.stat"))
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		t := throttle{cgroup: "/" + filepath.ToSlash(rel)}
		t.periods, t.throttled, t.throttledUsec = parseCPUStat(string(stat))
		if ev, err := os.ReadFile(filepath.Join(path, "memory.events")); err == nil {
			t.oomKills, t.memoryHigh = parseMemoryEvents(string(ev))
		}
		ts = append(ts, t)
		return nil
	})
	if err != nil && !errors.Is(err, fs.SkipAll) {
		return err
	}
	if err := out.WriteFile("cgroup-throttling.txt", formatThrottling(ts, 200)); err != nil {
		return err
	}
	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
		if data, err := os.ReadFile(filepath.Join(root, f)); err == nil {
			if err := out.WriteFile("cgroup-root-"+f, data); err != nil {
				return err
			}
		}
	}
	return nil
}
