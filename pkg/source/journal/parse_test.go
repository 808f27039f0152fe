package journal

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"nodemend.dev/nodemend/pkg/logline"
)

// Fixture entries as journalctl -o json --all prints them (systemd 252; a
// few fields such as _MACHINE_ID, _HOSTNAME and _BOOT_ID trimmed): the
// trusted fields (leading "_") are journald's own, the rest the sender's.
const (
	kubeletEntry    = `{"__CURSOR":"s=1c0ffee;i=2a1;b=0123456789abcdef0123456789abcdef;m=3e9;t=64748462f8240;x=9d3782f4182ebe32","__REALTIME_TIMESTAMP":"1767225601234567","__MONOTONIC_TIMESTAMP":"123456789","_BOOT_ID":"0123456789abcdef0123456789abcdef","PRIORITY":"6","_TRANSPORT":"stdout","_STREAM_ID":"5f3c2e","SYSLOG_FACILITY":"3","SYSLOG_IDENTIFIER":"kubelet","_PID":"1234","_UID":"0","_GID":"0","_COMM":"kubelet","_EXE":"/usr/bin/kubelet","_SYSTEMD_CGROUP":"/system.slice/kubelet.service","_SYSTEMD_UNIT":"kubelet.service","_SYSTEMD_SLICE":"system.slice","MESSAGE":"E0101 00:00:01.234567    1234 kubelet.go:2412] \"Container runtime network not ready\" networkReady=\"NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized\""}`
	containerdEntry = `{"__CURSOR":"s=1c0ffee;i=2a2","__REALTIME_TIMESTAMP":"1767225602000000","_TRANSPORT":"stdout","_PID":"812","_UID":"0","_COMM":"containerd","_SYSTEMD_UNIT":"containerd.service","SYSLOG_IDENTIFIER":"containerd","MESSAGE":"time=\"2026-01-01T00:00:02.000000000Z\" level=error msg=\"failed to reload cni configuration after receiving fs change event(REMOVE        \\\"/etc/cni/net.d/10-aws.conflist\\\")\" error=\"cni config load failed: no network config found in /etc/cni/net.d: cni plugin not initialized: failed to load cni config\""}`
	unitFailedEntry = `{"__CURSOR":"s=1c0ffee;i=2a3","__REALTIME_TIMESTAMP":"1767225603000000","_TRANSPORT":"journal","PRIORITY":"4","SYSLOG_FACILITY":"3","SYSLOG_IDENTIFIER":"systemd","CODE_FILE":"src/core/unit.c","CODE_FUNC":"unit_log_failure","_PID":"1","_UID":"0","_GID":"0","_COMM":"systemd","_EXE":"/usr/lib/systemd/systemd","_CMDLINE":"/sbin/init","_SYSTEMD_CGROUP":"/init.scope","_SYSTEMD_UNIT":"init.scope","_SYSTEMD_SLICE":"-.slice","UNIT":"kubelet.service","MESSAGE_ID":"d9b373ed55a64feb8242e02dbe79a49c","UNIT_RESULT":"exit-code","MESSAGE":"kubelet.service: Failed with result 'exit-code'."}`
	restartEntry    = `{"__CURSOR":"s=1c0ffee;i=2a4","__REALTIME_TIMESTAMP":"1767225604000000","_TRANSPORT":"journal","SYSLOG_IDENTIFIER":"systemd","_PID":"1","_UID":"0","_COMM":"systemd","_SYSTEMD_UNIT":"init.scope","UNIT":"containerd.service","MESSAGE":"containerd.service: Scheduled restart job, restart counter is at 5."}`
	binaryEntry     = `{"__CURSOR":"s=1c0ffee;i=2a5","__REALTIME_TIMESTAMP":"1767225605000000","_TRANSPORT":"stdout","_PID":"77","_UID":"1000","_COMM":"app","_SYSTEMD_UNIT":"app.service","MESSAGE":[98,97,100,32,255,10,110,101,120,116]}`
	// The kernel's own record, read by journald from /dev/kmsg: facility 0
	// (journald 246 and later write SYSLOG_FACILITY=0, older ones none).
	kernelEntry    = `{"__CURSOR":"s=1c0ffee;i=2a6","__REALTIME_TIMESTAMP":"1767225606000000","_SOURCE_MONOTONIC_TIMESTAMP":"4123456","_TRANSPORT":"kernel","PRIORITY":"4","SYSLOG_FACILITY":"0","SYSLOG_IDENTIFIER":"kernel","_KERNEL_SUBSYSTEM":"pci","_KERNEL_DEVICE":"+pci:0000:3b:00.0","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."}`
	oldKernelEntry = `{"__CURSOR":"s=1c0ffee;i=2a7","__REALTIME_TIMESTAMP":"1767225607000000","_TRANSPORT":"kernel","PRIORITY":"4","SYSLOG_IDENTIFIER":"kernel","MESSAGE":"cgroup: fork rejected by pids controller in /system.slice/kubelet.service"}`
)

// Forgeries: what an unprivileged user (or a root process pretending to be
// another daemon) makes journald record. Each names the kubelet or the
// kernel where only untrusted fields can.
const (
	// `logger -t kubelet MSG` from an SSH session: the syslog transport,
	// the user's session scope, SYSLOG_IDENTIFIER chosen by the sender.
	loggerEntry = `{"__CURSOR":"s=1c0ffee;i=2b1","__REALTIME_TIMESTAMP":"1767225611000000","_TRANSPORT":"syslog","PRIORITY":"5","SYSLOG_FACILITY":"1","SYSLOG_IDENTIFIER":"kubelet","SYSLOG_TIMESTAMP":"Jan  1 00:00:11 ","_PID":"4242","_UID":"1000","_GID":"1000","_COMM":"logger","_EXE":"/usr/bin/logger","_CMDLINE":"logger -t kubelet","_AUDIT_SESSION":"3","_AUDIT_LOGINUID":"1000","_SYSTEMD_CGROUP":"/user.slice/user-1000.slice/session-3.scope","_SYSTEMD_SESSION":"3","_SYSTEMD_OWNER_UID":"1000","_SYSTEMD_UNIT":"session-3.scope","_SYSTEMD_SLICE":"user-1000.slice","MESSAGE":"E1202 10:00:00.000000 1234 kubelet.go:1234] \"Failed\" err=\"fork/exec /usr/bin/mount: resource temporarily unavailable\""}`
	// `logger --journald` from a container of a pod (cgroup v1, cgroupfs
	// driver: no unit), sending UNIT and SYSLOG_IDENTIFIER of its choice.
	podJournaldEntry = `{"__CURSOR":"s=1c0ffee;i=2b2","__REALTIME_TIMESTAMP":"1767225612000000","_TRANSPORT":"journal","SYSLOG_IDENTIFIER":"systemd","UNIT":"kubelet.service","_PID":"90210","_UID":"65534","_GID":"65534","_COMM":"logger","_SYSTEMD_CGROUP":"/kubepods/besteffort/pod0d3c2e5a-4f1b-4c8e-9a77-1d2e3f405162/6f1d2c","_SYSTEMD_SLICE":"-.slice","MESSAGE":"kubelet.service: Failed to fork: Resource temporarily unavailable"}`
	// `echo MSG > /dev/kmsg` (root, or a privileged pod): journald reads it
	// back from the kernel with the facility the kernel forced, LOG_USER.
	injectedKmsgEntry = `{"__CURSOR":"s=1c0ffee;i=2b3","__REALTIME_TIMESTAMP":"1767225613000000","_SOURCE_MONOTONIC_TIMESTAMP":"5123456","_TRANSPORT":"kernel","PRIORITY":"4","SYSLOG_FACILITY":"1","SYSLOG_IDENTIFIER":"kernel","MESSAGE":"cgroup: fork rejected by pids controller in /system.slice/kubelet.service"}`
)

func TestParseEntry(t *testing.T) {
	at := func(usec int64) time.Time { return time.UnixMicro(usec) }
	tests := []struct {
		name, in string
		want     logline.Line
		cursor   string
	}{
		{"kubelet", kubeletEntry, logline.Line{Unit: "kubelet.service", Time: at(1767225601234567),
			Origin: logline.Origin{Root: true, Transport: "stdout", PID: "1234", UID: "0", Comm: "kubelet"},
			Text:   `E0101 00:00:01.234567    1234 kubelet.go:2412] "Container runtime network not ready" networkReady="NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"`},
			"s=1c0ffee;i=2a1;b=0123456789abcdef0123456789abcdef;m=3e9;t=64748462f8240;x=9d3782f4182ebe32"},
		{"containerd", containerdEntry, logline.Line{Unit: "containerd.service", Time: at(1767225602000000),
			Origin: logline.Origin{Root: true, Transport: "stdout", PID: "812", UID: "0", Comm: "containerd"},
			Text:   `time="2026-01-01T00:00:02.000000000Z" level=error msg="failed to reload cni configuration after receiving fs change event(REMOVE        \"/etc/cni/net.d/10-aws.conflist\")" error="cni config load failed: no network config found in /etc/cni/net.d: cni plugin not initialized: failed to load cni config"`},
			"s=1c0ffee;i=2a2"},
		{"systemd about a unit", unitFailedEntry, logline.Line{Unit: "kubelet.service", Time: at(1767225603000000),
			Origin: logline.Origin{Manager: true, Root: true, Transport: "journal", PID: "1", UID: "0", Comm: "systemd"},
			Text:   "kubelet.service: Failed with result 'exit-code'."}, "s=1c0ffee;i=2a3"},
		{"systemd restart", restartEntry, logline.Line{Unit: "containerd.service", Time: at(1767225604000000),
			Origin: logline.Origin{Manager: true, Root: true, Transport: "journal", PID: "1", UID: "0", Comm: "systemd"},
			Text:   "containerd.service: Scheduled restart job, restart counter is at 5."}, "s=1c0ffee;i=2a4"},
		{"binary message", binaryEntry, logline.Line{Unit: "app.service", Time: at(1767225605000000),
			Origin: logline.Origin{Transport: "stdout", PID: "77", UID: "1000", Comm: "app"},
			Text:   "bad \uFFFD\nnext"}, "s=1c0ffee;i=2a5"},
		{"kernel", kernelEntry, logline.Line{Time: at(1767225606000000),
			Origin: logline.Origin{Kernel: true, Transport: "kernel"},
			Text:   "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."}, "s=1c0ffee;i=2a6"},
		{"kernel, older journald", oldKernelEntry, logline.Line{Time: at(1767225607000000),
			Origin: logline.Origin{Kernel: true, Transport: "kernel"},
			Text:   "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"}, "s=1c0ffee;i=2a7"},
		{"forged: logger -t kubelet", loggerEntry, logline.Line{Unit: "session-3.scope", Time: at(1767225611000000),
			Origin: logline.Origin{Transport: "syslog", PID: "4242", UID: "1000", Comm: "logger"},
			Text:   `E1202 10:00:00.000000 1234 kubelet.go:1234] "Failed" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`}, "s=1c0ffee;i=2b1"},
		{"forged: UNIT from a pod", podJournaldEntry, logline.Line{Time: at(1767225612000000),
			Origin: logline.Origin{Transport: "journal", PID: "90210", UID: "65534", Comm: "logger"},
			Text:   "kubelet.service: Failed to fork: Resource temporarily unavailable"}, "s=1c0ffee;i=2b2"},
		{"forged: a user-space write to /dev/kmsg", injectedKmsgEntry, logline.Line{Time: at(1767225613000000),
			Origin: logline.Origin{Transport: "kernel", Facility: 1},
			Text:   "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"}, "s=1c0ffee;i=2b3"},
		{"null message", `{"__REALTIME_TIMESTAMP":"1","MESSAGE":null,"_SYSTEMD_UNIT":"x.service"}`,
			logline.Line{Unit: "x.service", Time: at(1)}, ""},
		{"identifier only", `{"__REALTIME_TIMESTAMP":"2","SYSLOG_IDENTIFIER":"sshd"}`,
			logline.Line{Time: at(2)}, ""},
		{"repeated field", `{"__REALTIME_TIMESTAMP":"3","MESSAGE":["first","second"],"_SYSTEMD_UNIT":["a.service","b.service"]}`,
			logline.Line{Unit: "a.service", Time: at(3), Text: "first"}, ""},
		{"repeated binary field", `{"__REALTIME_TIMESTAMP":"3","MESSAGE":[[104,105],"second"]}`,
			logline.Line{Time: at(3), Text: "hi"}, ""},
		{"empty array", `{"__REALTIME_TIMESTAMP":"3","MESSAGE":[]}`, logline.Line{Time: at(3)}, ""},
		{"PID 1 not about a unit", `{"__REALTIME_TIMESTAMP":"4","_PID":"1","_UID":"0","_SYSTEMD_UNIT":"init.scope","SYSLOG_IDENTIFIER":"systemd","MESSAGE":"Reached target multi-user.target."}`,
			logline.Line{Unit: "init.scope", Time: at(4), Origin: logline.Origin{Manager: true, Root: true, PID: "1", UID: "0"}, Text: "Reached target multi-user.target."}, ""},
		{"UNIT of another process is not a unit", `{"__REALTIME_TIMESTAMP":"5","_PID":"4242","UNIT":"kubelet.service","SYSLOG_IDENTIFIER":"systemd","MESSAGE":"m"}`,
			logline.Line{Time: at(5), Origin: logline.Origin{PID: "4242"}, Text: "m"}, ""},
		{"UNIT without a sender is not a unit", `{"__REALTIME_TIMESTAMP":"5","UNIT":"kubelet.service","SYSLOG_IDENTIFIER":"systemd","MESSAGE":"m"}`,
			logline.Line{Time: at(5), Text: "m"}, ""},
		{"unit wins over UNIT", `{"__REALTIME_TIMESTAMP":"6","_SYSTEMD_UNIT":"a.service","UNIT":"b.service","MESSAGE":"m"}`,
			logline.Line{Unit: "a.service", Time: at(6), Text: "m"}, ""},
		{"a kernel entry has no unit", `{"__REALTIME_TIMESTAMP":"7","_TRANSPORT":"kernel","_SYSTEMD_UNIT":"kubelet.service","_PID":"1","MESSAGE":"m"}`,
			logline.Line{Time: at(7), Origin: logline.Origin{Kernel: true, Transport: "kernel", PID: "1"}, Text: "m"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cursor, err := parseEntry([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Source = logline.Journal
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if cursor != tt.cursor {
				t.Fatalf("cursor %q, want %q", cursor, tt.cursor)
			}
		})
	}
}

func TestParseEntryMalformed(t *testing.T) {
	for _, in := range []string{
		``,
		`{`,
		`[]`,
		`"x"`,
		`{"MESSAGE":"no timestamp"}`,
		`{"__REALTIME_TIMESTAMP":null,"MESSAGE":"m"}`,
		`{"__REALTIME_TIMESTAMP":"abc","MESSAGE":"m"}`,
		`{"__REALTIME_TIMESTAMP":"-5","MESSAGE":"m"}`,
		`{"__REALTIME_TIMESTAMP":"99999999999999999999","MESSAGE":"m"}`,
		`{"__REALTIME_TIMESTAMP":1767225601234567,"MESSAGE":"m"}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":[256]}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":[1,"a"]}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":[[[1]]]}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":{"a":1}}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":true}`,
		`{"__REALTIME_TIMESTAMP":"1","_SYSTEMD_UNIT":5}`,
		kubeletEntry[:len(kubeletEntry)/2], // cut short
	} {
		if l, err := ParseEntry([]byte(in)); err == nil {
			t.Errorf("ParseEntry(%.60q) = %+v, want an error", in, l)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseEntry(%.60q) error %v does not wrap ErrMalformed", in, err)
		}
	}
}

func TestParseEntryLong(t *testing.T) {
	long := strings.Repeat("é", 1<<19) // 1 MiB
	l, err := ParseEntry([]byte(`{"__REALTIME_TIMESTAMP":"1","MESSAGE":"` + long + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Text) != MaxMessageBytes || !utf8.ValidString(l.Text) {
		t.Fatalf("text length %d valid %v", len(l.Text), utf8.ValidString(l.Text))
	}
	// A byte array too, with an odd cut inside a rune.
	var b strings.Builder
	b.WriteString(`{"__REALTIME_TIMESTAMP":"1","MESSAGE":[97`)
	for range MaxMessageBytes/2 + 100 {
		b.WriteString(",195,169")
	}
	b.WriteString("]}")
	l, err = ParseEntry([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Text) > MaxMessageBytes || len(l.Text) < MaxMessageBytes-3 || !utf8.ValidString(l.Text) {
		t.Fatalf("text length %d valid %v", len(l.Text), utf8.ValidString(l.Text))
	}
}

// parseEntryJSON is the reference for parseEntry: encoding/json finds the
// fields.
func parseEntryJSON(b []byte) (logline.Line, string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return logline.Line{}, "", err
	}
	if m == nil {
		return logline.Line{}, "", errors.New("null")
	}
	e := entry{Message: m["MESSAGE"], Realtime: m["__REALTIME_TIMESTAMP"], SystemUnit: m["_SYSTEMD_UNIT"],
		Unit: m["UNIT"], Transport: m["_TRANSPORT"], PID: m["_PID"], UID: m["_UID"], Comm: m["_COMM"],
		Facility: m["SYSLOG_FACILITY"], Cursor: m["__CURSOR"]}
	return e.line()
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{kubeletEntry, containerdEntry, unitFailedEntry, restartEntry, binaryEntry, kernelEntry,
		oldKernelEntry, loggerEntry, podJournaldEntry, injectedKmsgEntry,
		` { "MESSAGE" : "a" , "__REALTIME_TIMESTAMP" : "1" , "X" : { "a" : [ 1 , -2.5e3 , true , null , { } , [ ] ] } } `,
		`{"MESS\u0041GE":"escaped key","__REALTIME_TIMESTAMP":"1","MESSAGE":"dup"}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":"\ud83d\ude00 \ud800 \"q\" \/ \u0000"}`,
	} {
		want, wantCursor, wantErr := parseEntryJSON([]byte(in))
		got, cursor, err := parseEntry([]byte(in))
		if wantErr != nil || err != nil || got != want || cursor != wantCursor {
			t.Errorf("%.50q: got %+v %q %v, want %+v %q %v", in, got, cursor, err, want, wantCursor, wantErr)
		}
	}
	for _, in := range []string{`{"a":1}x`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":"x` + "\n" + `}`, `{"a":tru}`, `{"a":-}`, "{\"a\":\"\x01\"}", `{"a":[1,]}`} {
		if _, _, err := parseEntry([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: error %v, want malformed", in, err)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{kubeletEntry, containerdEntry, unitFailedEntry, binaryEntry, kernelEntry, loggerEntry, podJournaldEntry, injectedKmsgEntry,
		`{"__REALTIME_TIMESTAMP":"3","MESSAGE":[[104,105],"second"]}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":null}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":"\u00e9\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := ParseEntry(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if l.Source != logline.Journal {
			t.Fatalf("line %+v", l)
		}
		if len(l.Text) > MaxMessageBytes || !utf8.ValidString(l.Text) || !utf8.ValidString(l.Unit) || len(l.Unit) > maxUnitBytes {
			t.Fatalf("bad text or unit: %d %q", len(l.Text), l.Unit)
		}
	})
}

// FuzzScanner checks the hand-written scanner against encoding/json: what
// encoding/json accepts, parseEntry must accept with the same result.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{kubeletEntry, binaryEntry, `{"MESS\u0041GE":"k","__REALTIME_TIMESTAMP":"1","X":[{"a":[1,2.5e-3,null]}]}`,
		`{"__REALTIME_TIMESTAMP":"1","MESSAGE":"\ud83d\ude00 \ud800\u0041 \"q\" \/ \u0000 \b\f\n\r\t ` + "\xff\xc3\xa9" + `","UNIT":["a\u00e9",[1]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, wantCursor, wantErr := parseEntryJSON(in)
		if wantErr != nil {
			return
		}
		got, cursor, err := parseEntry(in)
		if err != nil || got != want || cursor != wantCursor {
			t.Fatalf("got %+v %q %v, want %+v %q", got, cursor, err, want, wantCursor)
		}
	})
}

func BenchmarkParseEntry(b *testing.B) {
	for _, bm := range []struct{ name, in string }{
		{"kubelet", kubeletEntry},
		{"unit-failed", unitFailedEntry},
		{"binary", binaryEntry},
	} {
		b.Run(bm.name, func(b *testing.B) {
			in := []byte(bm.in)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseEntry(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
