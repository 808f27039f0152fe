package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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

// journalContextLines is how many entries before a journal window are read
// as context for the redactor.
const journalContextLines = 200

// journal writes the journal of filter into file. The window (--since,
// --lines) may start inside a key block or a YAML block printed line by
// line; the entries just before its first one are fed to the redactor as
// context, so that it knows.
func (e *Env) journal(ctx context.Context, out *collect.Output, file string, filter ...string) error {
	return runToolWith(ctx, e, out, file, func(dst *collect.File) io.Writer {
		return &journalWindow{dst: dst, context: func(first []byte) {
			until, ok := journalTime(first)
			if !ok {
				return
			}
			args := []string{"--no-pager", "--output=short-iso-precise", "--lines=" + strconv.Itoa(journalContextLines),
				"--until=@" + strconv.FormatInt(until.Unix()+1, 10)}
			if root := filepath.Clean(e.HostRoot); root != "/" {
				args = append(args, "--root="+root)
			}
			var b bytes.Buffer
			if err := e.Commands.Run(ctx, "journalctl", append(args, filter...), &limitedBuffer{b: &b, max: 1 << 20}); err == nil {
				_ = dst.Context(beforeLine(b.Bytes(), first))
			}
		}}
	}, "journalctl", e.journalArgs(filter...)...)
}

// beforeLine cuts text before the first line equal to line: the context
// query ends at a whole second, so it returns the window's first entries
// too, and a state a line opens (a secret env var's name, whose value is on
// the next line) must meet the window's line, not its copy.
func beforeLine(text, line []byte) []byte {
	for off := 0; off < len(text); {
		end := bytes.IndexByte(text[off:], '\n')
		if end < 0 {
			end = len(text) - off
		}
		if bytes.Equal(text[off:off+end], line) {
			return text[:off]
		}
		off += end + 1
	}
	return text
}

// journalTime reads the timestamp of a short-iso-precise journal line.
func journalTime(line []byte) (time.Time, bool) {
	f, _, _ := bytes.Cut(line, []byte(" "))
	t, err := time.Parse("2006-01-02T15:04:05.999999-0700", string(f))
	return t, err == nil
}

// journalWindow holds back the first line of journalctl's output until the
// context before it has been fed to the redactor.
type journalWindow struct {
	dst     io.Writer
	context func(first []byte)
	buf     []byte
	started bool
}

func (j *journalWindow) Write(p []byte) (int, error) {
	if j.started {
		return j.dst.Write(p)
	}
	j.buf = append(j.buf, p...)
	i := bytes.IndexByte(j.buf, '\n')
	if i < 0 && len(j.buf) < 64<<10 {
		return len(p), nil
	}
	if i < 0 {
		i = len(j.buf)
	}
	j.started = true
	j.context(j.buf[:i])
	if _, err := j.dst.Write(j.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is held back (output without a newline).
func (j *journalWindow) Close() error {
	if j.started || len(j.buf) == 0 {
		return nil
	}
	j.started = true
	j.context(j.buf)
	_, err := j.dst.Write(j.buf)
	return err
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
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

// formatCmdline joins /proc/<pid>/cmdline's NUL-separated arguments with
// spaces, quoting (Go syntax) an argument that is empty or holds spaces,
// quotes, backslashes or unprintable bytes: where an argument ends stays
// visible, to the reader and to the redactor ("--password=a b" is one
// value, not "a" and an argument "b").
func formatCmdline(raw []byte) string {
	raw = bytes.TrimRight(raw, "\x00")
	if len(raw) == 0 {
		return ""
	}
	args := bytes.Split(raw, []byte{0})
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
		if len(a) == 0 || bytes.ContainsFunc(a, func(r rune) bool {
			return r <= ' ' || r == '"' || r == '\'' || r == '\\' || r == 0x7f || r == utf8.RuneError
		}) {
			out[i] = strconv.Quote(string(a))
		}
	}
	return strings.Join(out, " ")
}

// formatEnviron writes /proc/<pid>/environ one variable a line; a newline
// inside a value is written as \n, so that a variable's whole value is on
// its line (a name's value runs to the end of its line for the redactor).
func formatEnviron(raw []byte) []byte {
	var b bytes.Buffer
	for _, kv := range bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0}) {
		kv = bytes.ReplaceAll(kv, []byte("\r"), []byte(`\r`))
		b.Write(bytes.ReplaceAll(kv, []byte("\n"), []byte(`\n`)))
		b.WriteByte('\n')
	}
	return b.Bytes()
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
			p.cmdline = formatCmdline(cl)
		}
		ps = append(ps, p)
		if daemons[p.comm] {
			if env, err := os.ReadFile(e.hostPath(dir + "environ")); err == nil {
				if err := out.WriteFile(fmt.Sprintf("environ/%s-%d.env", p.comm, p.pid), formatEnviron(env)); err != nil {
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
