package collectors

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// daemons whose environment is kept (redacted): how they were started is
// often the answer.
func envDaemons() map[string]bool {
	return map[string]bool{"kubelet": true, "containerd": true, "dockerd": true, "crio": true, "nodemend-agent": true}
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
