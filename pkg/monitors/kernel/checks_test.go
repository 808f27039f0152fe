package kernel

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// fixedTimex is a TimexReader returning a fixture.
type fixedTimex struct {
	tx  Timex
	err error
}

func (f fixedTimex) ReadTimex() (Timex, error) { return f.tx, f.err }

// syncedTimex is what chronyd leaves behind on a healthy node: STA_PLL and
// STA_NANO, a few ms of maximum error.
var syncedTimex = Timex{Status: 0x2001, MaxErrorMicros: 4500, EstErrorMicros: 120}

// newHostMonitor builds the monitor over a fake host root with a fake clock,
// and thresholds overridden by thr when it has the reason.
func newHostMonitor(root *hostroot.Root, thr map[string]float64, tx TimexReader) *Monitor {
	env := detection.Env{
		HostRoot: root.Dir,
		Clock:    clocktesting.NewFakePassiveClock(t0),
		Threshold: func(reason string) float64 {
			if v, ok := thr[reason]; ok {
				return v
			}
			r, _ := health.LookupReason(reason)
			return r.Threshold.Default
		},
	}
	if tx == nil {
		tx = fixedTimex{tx: syncedTimex}
	}
	return New(env, Options{Timex: tx})
}

func runCheck(t *testing.T, m *Monitor, name string) ([]detection.Finding, error) {
	t.Helper()
	for _, c := range m.Checks() {
		if c.Name == name {
			return c.Run(context.Background())
		}
	}
	t.Fatalf("no check %q", name)
	return nil, nil
}

func TestChecksDeclared(t *testing.T) {
	// With a metadata service (on a cloud); without one the cloud check is
	// left out (TestNoCloudNoCloudCheck).
	m := New(detection.Env{}, Options{CloudEvents: func(context.Context) ([]cloudmeta.Event, error) { return nil, nil }})
	var reasons []string
	for _, c := range m.Checks() {
		if c.Period <= 0 || c.Run == nil || c.Name == "" {
			t.Errorf("check %+v: want a name, a period and Run", c)
		}
		reasons = append(reasons, c.Reasons...)
	}
	var want []string
	for _, r := range health.Reasons() {
		if r.Condition == health.KernelReady && r.Source == health.FromCheck {
			want = append(want, r.Name)
		}
	}
	slices.Sort(reasons)
	slices.Sort(want)
	if !slices.Equal(reasons, want) {
		t.Fatalf("checks cover %v, registry has %v", reasons, want)
	}

	m = New(detection.Env{}, Options{LimitsPeriod: 5e9, ZombiePeriod: 7e9, ClockPeriod: 11e9, EnvironPeriod: 13e9})
	var periods []string
	for _, c := range m.Checks() {
		periods = append(periods, c.Name+"="+c.Period.String())
	}
	if got := strings.Join(periods, ","); got != "kernel-pid-max=5s,kernel-open-files=5s,kernel-zombies=7s,kernel-environment=13s,kernel-clock=11s" {
		t.Fatalf("periods %s", got)
	}
}

func TestHealthyNode(t *testing.T) {
	root := hostroot.New(t).WithProc()
	m := newHostMonitor(root, nil, nil)
	for _, c := range m.Checks() {
		got, err := c.Run(context.Background())
		if err != nil || len(got) != 0 {
			t.Errorf("%s on a healthy node: %v, %v", c.Name, got, err)
		}
	}
}

// TestDefaultThresholds runs without an Env.Threshold: the registry defaults apply.
func TestDefaultThresholds(t *testing.T) {
	root := hostroot.New(t).WithProc()
	root.WriteFile("proc/loadavg", "3.10 2.90 2.70 12/720617 998877\n") // 70.0% of threads-max
	m := New(detection.Env{HostRoot: root.Dir}, Options{Timex: fixedTimex{tx: syncedTimex}})
	got, err := runCheck(t, m, "kernel-pid-max")
	if err != nil || len(got) != 1 {
		t.Fatalf("got %v, %v; want one finding at the default 70%%", got, err)
	}
}

func TestPIDMaxCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		remove  string
		thr     float64
		want    string // substring of the one finding's message; "" means none
		wantErr bool
	}{
		{name: "default node is far below"},
		{
			name:  "threads-max is the lower limit",
			files: map[string]string{"proc/loadavg": "41.20 39.80 35.10 57/900000 3999123\n"},
			want:  "900000 tasks (processes and threads) use 87.4% of kernel.threads-max 1029309",
		},
		{
			name: "pid_max is the lower limit",
			files: map[string]string{
				"proc/loadavg":                "1.00 1.00 1.00 2/30000 31000\n",
				"proc/sys/kernel/pid_max":     "32768\n",
				"proc/sys/kernel/threads-max": "1029309\n",
			},
			want: "use 91.6% of kernel.pid_max 32768",
		},
		{
			name:  "exactly at the threshold fires",
			files: map[string]string{"proc/loadavg": "1.00 1.00 1.00 2/70000 31000\n", "proc/sys/kernel/pid_max": "100000\n"},
			want:  "use 70.0% of kernel.pid_max 100000",
		},
		{
			name:  "just below the threshold",
			files: map[string]string{"proc/loadavg": "1.00 1.00 1.00 2/69999 31000\n", "proc/sys/kernel/pid_max": "100000\n"},
		},
		{
			name:  "a configured threshold wins",
			files: map[string]string{"proc/loadavg": "41.20 39.80 35.10 57/900000 3999123\n"},
			thr:   90,
		},
		{name: "missing loadavg", remove: "proc/loadavg", wantErr: true},
		{name: "missing pid_max", remove: "proc/sys/kernel/pid_max", wantErr: true},
		{name: "missing threads-max", remove: "proc/sys/kernel/threads-max", wantErr: true},
		{name: "missing proc", remove: "proc", wantErr: true},
		{name: "loadavg without tasks", files: map[string]string{"proc/loadavg": "0.52 0.58 0.59 1234 56789\n"}, wantErr: true},
		{name: "loadavg with a bad count", files: map[string]string{"proc/loadavg": "0.52 0.58 0.59 3/12x4 56789\n"}, wantErr: true},
		{name: "empty loadavg", files: map[string]string{"proc/loadavg": ""}, wantErr: true},
		{name: "pid_max not a number", files: map[string]string{"proc/sys/kernel/pid_max": "lots\n"}, wantErr: true},
		{name: "pid_max zero", files: map[string]string{"proc/sys/kernel/pid_max": "0\n"}, wantErr: true},
		{name: "pid_max empty", files: map[string]string{"proc/sys/kernel/pid_max": "\n"}, wantErr: true},
		{name: "negative threads-max", files: map[string]string{"proc/sys/kernel/threads-max": "-1\n"}, wantErr: true},
		{name: "invalid threshold", thr: math.NaN(), wantErr: true},
		{name: "threshold above 100%", thr: 150, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithProc()
			for rel, content := range tc.files {
				root.WriteFile(rel, content)
			}
			if tc.remove != "" {
				root.Remove(tc.remove)
			}
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonApproachingKernelPidMax] = tc.thr
			}
			got, err := runCheck(t, newHostMonitor(root, thr, nil), "kernel-pid-max")
			checkResult(t, got, err, health.ReasonApproachingKernelPidMax, tc.want, tc.wantErr)
		})
	}
}

func TestOpenFilesCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fileNr  string
		remove  bool
		thr     float64
		want    string
		wantErr bool
	}{
		{name: "systemd's LONG_MAX maximum", fileNr: "9184\t0\t9223372036854775807\n"},
		{name: "above", fileNr: "800000\t0\t1000000\n", want: "800000 file handles in use, 80.0% of fs.file-max 1000000; threshold 70%"},
		{name: "exactly at", fileNr: "700000\t0\t1000000\n", want: "70.0% of fs.file-max 1000000"},
		{name: "below", fileNr: "699999\t0\t1000000\n"},
		{name: "free handles are not in use", fileNr: "800000\t200000\t1000000\n"},
		{name: "configured threshold", fileNr: "800000\t0\t1000000\n", thr: 85},
		{name: "missing", remove: true, wantErr: true},
		{name: "two fields", fileNr: "9184\t0\n", wantErr: true},
		{name: "not numbers", fileNr: "a\tb\tc\n", wantErr: true},
		{name: "negative", fileNr: "-1\t0\t1000\n", wantErr: true},
		{name: "zero maximum", fileNr: "10\t0\t0\n", wantErr: true},
		{name: "more free than allocated", fileNr: "10\t20\t1000\n", wantErr: true},
		{name: "empty", fileNr: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithProc()
			if tc.fileNr != "" || !tc.remove {
				root.WriteFile("proc/sys/fs/file-nr", tc.fileNr)
			}
			if tc.remove {
				root.Remove("proc/sys/fs/file-nr")
			}
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonApproachingMaxOpenFiles] = tc.thr
			}
			got, err := runCheck(t, newHostMonitor(root, thr, nil), "kernel-open-files")
			checkResult(t, got, err, health.ReasonApproachingMaxOpenFiles, tc.want, tc.wantErr)
		})
	}
}

func addZombies(root *hostroot.Root, n, firstPID, ppid int) {
	for i := 0; i < n; i++ {
		root.AddProcess(hostroot.Process{PID: firstPID + i, PPID: ppid, Comm: "defunct-worker", State: 'Z'})
	}
}

func TestZombieCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*hostroot.Root)
		thr     float64
		want    string
		wantErr bool
	}{
		{name: "no zombies"},
		{
			name:  "below the threshold",
			setup: func(r *hostroot.Root) { addZombies(r, 499, 20000, 4242) },
		},
		{
			name:  "at the threshold",
			setup: func(r *hostroot.Root) { addZombies(r, 500, 20000, 4242) },
			want:  "500 of 508 processes are zombies (threshold 500); 500 of them are children of PID 4242, which does not reap them",
		},
		{
			name: "the parent holding most zombies is named",
			setup: func(r *hostroot.Root) {
				addZombies(r, 450, 20000, 4242)
				addZombies(r, 60, 30000, 1034)
			},
			want: "510 of 518 processes are zombies (threshold 500); 450 of them are children of PID 4242",
		},
		{
			name:  "configured threshold",
			setup: func(r *hostroot.Root) { addZombies(r, 20, 20000, 4242) },
			thr:   10,
			want:  "20 of 28 processes are zombies (threshold 10)",
		},
		{
			name: "non-process entries and vanished processes are skipped",
			setup: func(r *hostroot.Root) {
				r.WriteFile("proc/self/stat", "garbage")
				r.WriteFile("proc/net/dev", "")
				r.WriteFile("proc/sys/kernel/ostype", "Linux\n")
				r.WriteFile("proc/31337/status", "Name:\tgone\n") // exited: no stat any more
				addZombies(r, 3, 20000, 1)
			},
			thr:  3,
			want: "3 of 11 processes are zombies",
		},
		{
			name:    "malformed stat",
			setup:   func(r *hostroot.Root) { r.WriteFile("proc/5555/stat", "5555 defunct Z 1\n") },
			wantErr: true,
		},
		{
			name:    "stat without a state",
			setup:   func(r *hostroot.Root) { r.WriteFile("proc/5555/stat", "5555 (defunct)\n") },
			wantErr: true,
		},
		{
			name:    "missing proc",
			setup:   func(r *hostroot.Root) { r.Remove("proc") },
			wantErr: true,
		},
		{name: "invalid threshold", thr: -1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithProc()
			if tc.setup != nil {
				tc.setup(root)
			}
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonExcessiveZombieProcesses] = tc.thr
			}
			got, err := runCheck(t, newHostMonitor(root, thr, nil), "kernel-zombies")
			checkResult(t, got, err, health.ReasonExcessiveZombieProcesses, tc.want, tc.wantErr)
		})
	}
}

func TestClockCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tx      fixedTimex
		want    string
		wantErr bool
	}{
		{name: "synchronized", tx: fixedTimex{tx: syncedTimex}},
		{
			name: "STA_UNSYNC",
			tx:   fixedTimex{tx: Timex{Status: 0x0041, MaxErrorMicros: 1500000, EstErrorMicros: 1000}},
			want: "system clock not synchronized: the kernel flags it unsynchronized (STA_UNSYNC): no time source disciplines it (maxerror 1.5s, esterror 1ms, status 0x0041)",
		},
		{
			name: "fresh boot without NTP",
			tx:   fixedTimex{tx: Timex{Status: 0x0040, MaxErrorMicros: 16000000, EstErrorMicros: 16000000}},
			want: "STA_UNSYNC) and its maximum error reached the 16s bound",
		},
		{
			name: "maxerror at the kernel bound",
			tx:   fixedTimex{tx: Timex{Status: 0x2001, MaxErrorMicros: 16000000}},
			want: "its maximum error reached the kernel's 16s unsynchronized bound",
		},
		{name: "maxerror just below the bound", tx: fixedTimex{tx: Timex{Status: 0x2001, MaxErrorMicros: 15999999}}},
		{name: "adjtimex fails", tx: fixedTimex{err: errors.New("operation not permitted")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runCheck(t, newHostMonitor(hostroot.New(t), nil, tc.tx), "kernel-clock")
			checkResult(t, got, err, health.ReasonClockUnsynchronized, tc.want, tc.wantErr)
		})
	}
}

// TestSystemTimex reads this machine's clock: it must work without privileges
// and return plausible values, whatever the sync state.
func TestSystemTimex(t *testing.T) {
	tx, err := SystemTimex{}.ReadTimex()
	if err != nil {
		t.Fatalf("adjtimex: %v", err)
	}
	if tx.MaxErrorMicros < 0 || tx.EstErrorMicros < 0 {
		t.Fatalf("implausible timex %+v", tx)
	}
	t.Logf("this machine: %+v, findings %v", tx, evalClock(tx, t0))
}

func checkResult(t *testing.T, got []detection.Finding, err error, reason, want string, wantErr bool) {
	t.Helper()
	switch {
	case wantErr:
		if err == nil {
			t.Fatalf("want an error, got findings %v", got)
		}
		if len(got) != 0 {
			t.Fatalf("error %v with findings %v", err, got)
		}
		t.Logf("error: %v", err)
	case err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == "":
		if len(got) != 0 {
			t.Fatalf("want no finding, got %v", got)
		}
	default:
		if len(got) != 1 {
			t.Fatalf("want one finding, got %v", got)
		}
		f := got[0]
		if f.Reason != reason || !f.Observed.Equal(t0) || !strings.Contains(f.Message, want) {
			t.Fatalf("finding %+v\nwant reason %s, observed %v, message containing %q", f, reason, t0, want)
		}
	}
}

// --- pure functions ----------------------------------------------------------

func TestEvalPIDMax(t *testing.T) {
	for _, tc := range []struct {
		u       pidUsage
		thr     float64
		fire    bool
		wantErr bool
	}{
		{u: pidUsage{Tasks: 1234, PIDMax: 4194304, ThreadsMax: 1029309}, thr: 70},
		{u: pidUsage{Tasks: 720517, PIDMax: 4194304, ThreadsMax: 1029309}, thr: 70, fire: true},
		{u: pidUsage{Tasks: 720516, PIDMax: 4194304, ThreadsMax: 1029309}, thr: 70},
		{u: pidUsage{Tasks: 40000, PIDMax: 32768, ThreadsMax: 1029309}, thr: 70, fire: true}, // over the limit
		{u: pidUsage{Tasks: 1, PIDMax: 0, ThreadsMax: 1}, thr: 70, wantErr: true},
		{u: pidUsage{Tasks: 1, PIDMax: 1, ThreadsMax: 0}, thr: 70, wantErr: true},
	} {
		got, err := evalPIDMax(tc.u, tc.thr, t0)
		if (err != nil) != tc.wantErr || (len(got) == 1) != tc.fire || len(got) > 1 {
			t.Errorf("evalPIDMax(%+v, %v) = %v, %v", tc.u, tc.thr, got, err)
		}
	}
}

func TestEvalOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		h       fileHandles
		thr     float64
		fire    bool
		wantErr bool
	}{
		{h: fileHandles{9184, 0, math.MaxInt64}, thr: 70},
		{h: fileHandles{math.MaxInt64, 0, math.MaxInt64}, thr: 70, fire: true},
		{h: fileHandles{math.MaxUint64, 0, math.MaxUint64}, thr: 100, fire: true},
		{h: fileHandles{900, 300, 1000}, thr: 70},
		{h: fileHandles{1000, 300, 1000}, thr: 70, fire: true},
		{h: fileHandles{1, 2, 1000}, thr: 70, wantErr: true},
		{h: fileHandles{1, 0, 0}, thr: 70, wantErr: true},
	} {
		got, err := evalOpenFiles(tc.h, tc.thr, t0)
		if (err != nil) != tc.wantErr || (len(got) == 1) != tc.fire || len(got) > 1 {
			t.Errorf("evalOpenFiles(%+v, %v) = %v, %v", tc.h, tc.thr, got, err)
		}
	}
}

func TestEvalZombies(t *testing.T) {
	for _, tc := range []struct {
		s    processScan
		thr  float64
		want string
	}{
		{s: processScan{Processes: 5000, Zombies: 499, ZombieParents: map[int]int{1: 499}}, thr: 500},
		{
			s:    processScan{Processes: 5000, Zombies: 500, ZombieParents: map[int]int{7: 250, 3: 250}},
			thr:  500,
			want: "500 of 5000 processes are zombies (threshold 500); 250 of them are children of PID 3, which does not reap them",
		},
		{s: processScan{Processes: 5, Zombies: 5}, thr: 1, want: "5 of 5 processes are zombies (threshold 1)"},
	} {
		got := evalZombies(tc.s, tc.thr, t0)
		var msg string
		if len(got) == 1 {
			msg = got[0].Message
		}
		if len(got) > 1 || msg != tc.want {
			t.Errorf("evalZombies(%+v, %v) = %v, want message %q", tc.s, tc.thr, got, tc.want)
		}
	}
}

func TestParseStatState(t *testing.T) {
	for _, tc := range []struct {
		in      string
		state   byte
		ppid    int
		wantErr bool
	}{
		{in: hostroot.StatLine(hostroot.Process{PID: 1, Comm: "systemd", State: 'S'}), state: 'S'},
		{in: hostroot.StatLine(hostroot.Process{PID: 1234, PPID: 1, Comm: "tmux: server", State: 'S'}), state: 'S', ppid: 1},
		{in: hostroot.StatLine(hostroot.Process{PID: 1301, PPID: 1300, Comm: "(sd-pam)", State: 'S'}), state: 'S', ppid: 1300},
		{in: hostroot.StatLine(hostroot.Process{PID: 9, PPID: 4242, Comm: ") Z 1 (", State: 'R'}), state: 'R', ppid: 4242},
		{in: "20000 (defunct-worker) Z 4242", state: 'Z', ppid: 4242},
		{in: "20000 (x) Z 4242\n", state: 'Z', ppid: 4242},
		{in: "", wantErr: true},
		{in: "20000 defunct Z 4242", wantErr: true},
		{in: "20000 (defunct)", wantErr: true},
		{in: "20000 (defunct) Z", wantErr: true},
		{in: "20000 (defunct) Z ", wantErr: true},
		{in: "20000 (defunct) 7 1 1", wantErr: true},
		{in: "20000 (defunct) Z x 1", wantErr: true},
		{in: "20000 (defunct) Z -4 1", wantErr: true},
		{in: "20000 (defunct)ZZ 4 1", wantErr: true},
	} {
		state, ppid, err := parseStatState([]byte(tc.in))
		if (err != nil) != tc.wantErr || !tc.wantErr && (state != tc.state || ppid != tc.ppid) {
			t.Errorf("parseStatState(%q) = %c, %d, %v", tc.in, state, ppid, err)
		}
	}
}

func TestParseLoadavgTasks(t *testing.T) {
	for in, want := range map[string]uint64{
		"0.52 0.58 0.59 3/1234 56789\n":   1234,
		"0.00 0.00 0.00 1/1 1":            1,
		"112.01 98.33 77.10 97/4194000 3": 4194000,
	} {
		if got, err := parseLoadavgTasks([]byte(in)); err != nil || got != want {
			t.Errorf("parseLoadavgTasks(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0.52 0.58 0.59", "0.52 0.58 0.59 3/ 56789", "0.52 0.58 0.59 3/-1 56789", "0.52 0.58 0.59 3/99999999999999999999 5", "a b c d e f"} {
		if got, err := parseLoadavgTasks([]byte(in)); err == nil {
			t.Errorf("parseLoadavgTasks(%q) = %d, want an error", in, got)
		}
	}
}

func FuzzParseStatState(f *testing.F) {
	for _, p := range hostroot.DefaultProcesses {
		f.Add(hostroot.StatLine(p))
	}
	f.Add("1 () Z 0")
	f.Add("))) ")
	f.Fuzz(func(t *testing.T, s string) {
		state, ppid, err := parseStatState([]byte(s))
		if err == nil && (!isStateLetter(state) || ppid < 0) {
			t.Fatalf("parseStatState(%q) = %q, %d without error", s, state, ppid)
		}
	})
}

func FuzzParseLoadavgTasks(f *testing.F) {
	f.Add("0.52 0.58 0.59 3/1234 56789\n")
	f.Add("0 0 0 0/0 0")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseLoadavgTasks([]byte(s))
	})
}

func FuzzParseFileNr(f *testing.F) {
	f.Add("9184\t0\t9223372036854775807\n")
	f.Add("1 2 3 4")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseFileNr(strings.Fields(s))
		if err != nil {
			return
		}
		// Whatever parses must evaluate without panicking.
		_, _ = evalOpenFiles(h, 70, t0)
	})
}

func TestNoCloudNoCloudCheck(t *testing.T) {
	for _, c := range New(detection.Env{}, Options{}).Checks() {
		if c.Name == "kernel-cloud-events" {
			t.Fatal("a cloud check without a metadata service")
		}
	}
}

// TestCloudEventFindings: each scheduled event is a ScheduledMaintenance
// of its own (subject: the event ID), a spot notice a SpotInterruption;
// both Warnings in the registry.
func TestCloudEventFindings(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	fs := CloudEventFindings([]cloudmeta.Event{
		{Kind: cloudmeta.Maintenance, ID: "instance-event-1", Code: "system-reboot", NotBefore: now.Add(24 * time.Hour), NotAfter: now.Add(26 * time.Hour)},
		{Kind: cloudmeta.Maintenance, ID: "instance-event-2", Code: "instance-retirement", NotBefore: now.Add(48 * time.Hour)},
		{Kind: cloudmeta.Interruption, Code: "hibernate", NotBefore: now.Add(2 * time.Minute)},
	}, now)
	if len(fs) != 3 || fs[0].Subject == fs[1].Subject || fs[0].Reason != health.ReasonScheduledMaintenance || fs[2].Reason != health.ReasonSpotInterruption {
		t.Fatalf("findings %+v", fs)
	}
	if !strings.Contains(fs[0].Message, "system-reboot") || !strings.Contains(fs[0].Message, "in 24h0m0s") ||
		!strings.Contains(fs[2].Message, "hibernated at 2026-12-05T12:02:00Z (in 2m0s)") {
		t.Errorf("messages %q / %q", fs[0].Message, fs[2].Message)
	}
	for _, r := range []string{health.ReasonScheduledMaintenance, health.ReasonSpotInterruption} {
		if reg, _ := health.LookupReason(r); reg.Severity != health.Warning {
			t.Errorf("%s is %s in the registry, never Fatal", r, reg.Severity)
		}
	}
}
