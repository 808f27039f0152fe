package hostroot

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

// TestWithProcParsesLikeTheRealThing checks the fake /proc against an
// independent parser of the real files (prometheus/procfs).
func TestWithProcParsesLikeTheRealThing(t *testing.T) {
	r := New(t).WithProc()
	fs, err := procfs.NewFS(r.Path("proc"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.Stat()
	if err != nil || st.BootTime != 1718000000 || st.ProcessCreated != 56789 {
		t.Fatalf("stat: %+v, %v", st, err)
	}
	if la, err := fs.LoadAvg(); err != nil || la.Load1 != 0.52 {
		t.Fatalf("loadavg: %+v, %v", la, err)
	}
	if v, err := fs.SysctlInts("kernel.pid_max"); err != nil || len(v) != 1 || v[0] != 4194304 {
		t.Fatalf("pid_max: %v, %v", v, err)
	}
	if v, err := fs.SysctlStrings("fs.file-nr"); err != nil || strings.Join(v, " ") != "9184 0 9223372036854775807" {
		t.Fatalf("file-nr: %v, %v", v, err)
	}
	procs, err := fs.AllProcs()
	if err != nil || len(procs) != len(DefaultProcesses) {
		t.Fatalf("procs: %d, %v", len(procs), err)
	}
	byPID := map[int]Process{}
	for _, p := range DefaultProcesses {
		byPID[p.PID] = p
	}
	for _, p := range procs {
		s, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		want := byPID[p.PID]
		if s.PID != want.PID || s.Comm != want.Comm || s.State != string(want.State) || s.PPID != want.PPID || s.NumThreads != 1 {
			t.Errorf("pid %d: parsed %+v, want %+v", want.PID, s, want)
		}
		if n := len(strings.Fields(StatLine(want)[strings.LastIndexByte(StatLine(want), ')')+1:])); n != 50 {
			t.Errorf("pid %d: %d fields after (comm), want 50 (52 in all)", want.PID, n)
		}
	}
}

func TestAppendKmsgAndJournal(t *testing.T) {
	r := New(t)
	r.AppendKmsg(KmsgRecord(6, 1, 1000, "first"))
	r.AppendKmsg(KmsgRecord(3, 2, 2000, "second")+"\n", "6,3,3000,-;third")
	data, err := os.ReadFile(r.Path("dev/kmsg"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "6,1,1000,-;first\n3,2,2000,-;second\n6,3,3000,-;third\n"; got != want {
		t.Fatalf("dev/kmsg = %q, want %q", got, want)
	}

	r.AppendJournal(map[string]string{"MESSAGE": "a", "_SYSTEMD_UNIT": "kubelet.service"})
	r.AppendJournal(map[string]string{"MESSAGE": "b"}, map[string]string{"MESSAGE": "c"})
	f, err := os.Open(r.Path(JournalFixture))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]string
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, e["MESSAGE"])
	}
	if strings.Join(msgs, "") != "abc" {
		t.Fatalf("journal messages %v", msgs)
	}
}

func TestWriteFileAndRemove(t *testing.T) {
	r := New(t)
	r.WriteFile("proc/sys/kernel/pid_max", "32768\n")
	r.WriteFile("proc/sys/kernel/pid_max", "65536\n")
	if data, _ := os.ReadFile(r.Path("proc/sys/kernel/pid_max")); string(data) != "65536\n" {
		t.Fatalf("pid_max = %q", data)
	}
	r.Remove("proc")
	r.Remove("proc") // missing is fine
	if _, err := os.Stat(r.Path("proc")); !os.IsNotExist(err) {
		t.Fatalf("proc still there: %v", err)
	}
}
