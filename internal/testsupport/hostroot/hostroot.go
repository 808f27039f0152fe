// Package hostroot builds fake host roots for tests: a temporary directory laid
// out like the host filesystem the agent reads under --host-root (dev/kmsg,
// the journal, proc). Formats follow the real kernel files; the defaults
// describe a quiet, healthy node so that a test changes only what it is about.
package hostroot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// JournalFixture is where AppendJournal writes, relative to the root: one JSON
// object per line, with journal field names (MESSAGE, _SYSTEMD_UNIT, ...), the
// shape of `journalctl -o json`.
const JournalFixture = "var/log/journal/nodemend-fixture.jsonl"

// Root is a fake host root.
type Root struct {
	// Dir is the root directory, what the agent gets as --host-root.
	Dir string
	t   testing.TB
}

// New makes an empty host root in t.TempDir().
func New(t testing.TB) *Root {
	t.Helper()
	return &Root{Dir: t.TempDir(), t: t}
}

// Path returns the absolute path of rel (slash-separated) under the root.
func (r *Root) Path(rel string) string {
	return filepath.Join(r.Dir, filepath.FromSlash(rel))
}

// WriteFile writes content to rel, creating parent directories. It replaces
// the file when it exists.
func (r *Root) WriteFile(rel, content string) {
	r.t.Helper()
	p := r.Path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Remove deletes rel (a file or a whole directory); a missing path is fine.
func (r *Root) Remove(rel string) {
	r.t.Helper()
	if err := os.RemoveAll(r.Path(rel)); err != nil {
		r.t.Fatal(err)
	}
}

// AppendKmsg appends records to dev/kmsg, a regular file here, one per line.
// A record is what a read of /dev/kmsg returns, e.g. KmsgRecord's output:
// "6,1234,5678901,-;text".
func (r *Root) AppendKmsg(records ...string) {
	r.t.Helper()
	var b strings.Builder
	for _, rec := range records {
		b.WriteString(rec)
		if !strings.HasSuffix(rec, "\n") {
			b.WriteByte('\n')
		}
	}
	r.appendFile("dev/kmsg", b.String())
}

// KmsgRecord formats one /dev/kmsg record (Documentation/ABI/testing/dev-kmsg):
// "prio,seq,usec,flags;message", prio being facility<<3|level (kernel
// facility 0, so the log level: 3 err, 4 warning, 6 info) and usec the time
// since boot in microseconds.
func KmsgRecord(prio int, seq, usec uint64, msg string) string {
	return fmt.Sprintf("%d,%d,%d,-;%s", prio, seq, usec, msg)
}

// AppendJournal appends entries to JournalFixture as JSON lines.
func (r *Root) AppendJournal(entries ...map[string]string) {
	r.t.Helper()
	var b strings.Builder
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			r.t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	r.appendFile(JournalFixture, b.String())
}

func (r *Root) appendFile(rel, content string) {
	r.t.Helper()
	p := r.Path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		r.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// Process is one entry of /proc.
type Process struct {
	PID  int
	PPID int
	// Comm is the command name as the kernel stores it (at most 15 bytes on a
	// real kernel); it may contain spaces and parentheses.
	Comm string
	// State is the one-letter state of /proc/<pid>/stat: R, S, D, Z, T, t, X, I.
	State byte
}

// DefaultProcesses are the processes WithProc creates: a few daemons and
// kernel threads, none of them a zombie, with comms that exercise the stat
// format (spaces, parentheses).
var DefaultProcesses = []Process{
	{PID: 1, PPID: 0, Comm: "systemd", State: 'S'},
	{PID: 2, PPID: 0, Comm: "kthreadd", State: 'S'},
	{PID: 15, PPID: 2, Comm: "kworker/0:1-events", State: 'I'},
	{PID: 812, PPID: 1, Comm: "containerd", State: 'S'},
	{PID: 1034, PPID: 1, Comm: "kubelet", State: 'S'},
	{PID: 1234, PPID: 1, Comm: "tmux: server", State: 'S'},
	{PID: 1301, PPID: 1300, Comm: "(sd-pam)", State: 'S'},
	{PID: 4242, PPID: 812, Comm: "java", State: 'R'},
}

// WithProc writes a realistic /proc for a healthy node: kernel.pid_max
// 4194304, kernel.threads-max 1029309, 1234 tasks in loadavg, file-nr far
// below its maximum, stat with btime, uptime, and DefaultProcesses. Tests
// override single files with WriteFile.
func (r *Root) WithProc() *Root {
	r.t.Helper()
	r.WriteFile("proc/sys/kernel/pid_max", "4194304\n")
	r.WriteFile("proc/sys/kernel/threads-max", "1029309\n")
	r.WriteFile("proc/loadavg", "0.52 0.58 0.59 3/1234 56789\n")
	r.WriteFile("proc/sys/fs/file-nr", "9184\t0\t9223372036854775807\n")
	r.WriteFile("proc/sys/fs/file-max", "9223372036854775807\n")
	r.WriteFile("proc/uptime", "350735.47 2765328.42\n")
	r.WriteFile("proc/stat", strings.Join([]string{
		"cpu  4705 356 584 3699176 23060 0 277 0 0 0",
		"cpu0 1393 280 234 852871 6227 0 211 0 0 0",
		"cpu1 1112 13 115 948760 5629 0 21 0 0 0",
		"intr 2541813 22 9 0 0 0 0 0 0 1 0 0 0 157 0 0 0",
		"ctxt 4391735",
		"btime 1718000000",
		"processes 56789",
		"procs_running 3",
		"procs_blocked 0",
		"softirq 1536587 0 345214 2 56378 59218 0 1342 586140 0 488293",
		"",
	}, "\n"))
	for _, p := range DefaultProcesses {
		r.AddProcess(p)
	}
	return r
}

// AddProcess writes proc/<pid>/stat (and comm) for p.
func (r *Root) AddProcess(p Process) {
	r.t.Helper()
	dir := fmt.Sprintf("proc/%d/", p.PID)
	r.WriteFile(dir+"stat", StatLine(p))
	r.WriteFile(dir+"comm", p.Comm+"\n")
}

// StatLine formats /proc/<pid>/stat for p as the kernel does (fs/proc/array.c:
// "pid (comm) state ppid pgrp session ..." 52 fields), with plausible values
// for the fields nodemend does not read.
func StatLine(p Process) string {
	return fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 4194560 1523 0 12 0 41 17 0 0 20 0 1 0 1042 "+
		"23138304 1480 18446744073709551615 1 1 0 0 0 0 0 4096 17663 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		p.PID, p.Comm, p.State, p.PPID, p.PID, p.PID)
}
