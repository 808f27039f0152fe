package nvidia

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func kmsg(text string) logline.Line { return monitortest.Kernel(text, t0) }

// match runs line through the monitor's compiled rules and Interpret, as the
// agent does.
func match(t testing.TB, line logline.Line) []detection.Finding {
	t.Helper()
	m := New(detection.Env{}, Options{})
	matcher, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	var out []detection.Finding
	matcher.Match(line, func(mt logline.Match) { out = append(out, m.Interpret(mt)...) })
	return out
}

// The XID lines follow the NVIDIA driver's format as documented in the XID
// guide (docs.nvidia.com/deploy/xid-errors/index.html, "Viewing the Xid
// messages": `NVRM: Xid (PCI:0000:03:00): 14, Channel 00000001`) and the
// catalog's messages for each XID; 63 is the row-remapper text quoted in
// NVIDIA's A100 memory error management guide.
func TestRules(t *testing.T) {
	f := func(reason, subject, msg string) []detection.Finding {
		return []detection.Finding{{Reason: reason, Subject: subject, Message: msg, Observed: t0}}
	}
	cases := []struct {
		name string
		line string
		want []detection.Finding
	}{
		{"XID 79 fallen off the bus", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
			f(health.ReasonNvidiaXID79Error, "0000:3b:00", "XID 79 (GPU has fallen off the bus) on GPU 0000:3b:00, pid 1234 (python): GPU has fallen off the bus.")},
		{"XID 79 without process", "NVRM: Xid (PCI:0000:b5:00): 79, GPU has fallen off the bus.",
			f(health.ReasonNvidiaXID79Error, "0000:b5:00", "XID 79 (GPU has fallen off the bus) on GPU 0000:b5:00: GPU has fallen off the bus.")},
		{"driver's own fallen-off-the-bus line", "NVRM: GPU 0000:3B:00.0: GPU has fallen off the bus.",
			f(health.ReasonNvidiaXID79Error, "0000:3b:00", "XID 79 (GPU has fallen off the bus) on GPU 0000:3b:00")},
		{"XID 48 DBE", "NVRM: Xid (PCI:0000:1b:00): 48, pid=4242, name=train, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.",
			f(health.ReasonNvidiaXID48Error, "0000:1b:00", "XID 48 (Double bit ECC error) on GPU 0000:1b:00, pid 4242 (train): An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.")},
		{"XID 13 is the application's", "NVRM: Xid (PCI:0000:1b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
			f(health.ReasonNvidiaXID13Warning, "0000:1b:00", "XID 13 (Graphics engine exception) on GPU 0000:1b:00, pid 4242 (python3): Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")},
		{"XID 31 MMU fault with unknown pid", "NVRM: Xid (PCI:0000:1b:00): 31, pid='<unknown>', name=<unknown>, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
			f(health.ReasonNvidiaXID31Warning, "0000:1b:00", "XID 31 (GPU memory page fault) on GPU 0000:1b:00: Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")},
		{"XID 63 row remapper", "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
			f(health.ReasonNvidiaXID63Warning, "0000:10:1c", "XID 63 (ECC page retirement or row remapping recorded) on GPU 0000:10:1c, pid 1896: Row Remapper: New row marked for remapping, reset gpu to activate.")},
		{"XID 74 NVLink", "NVRM: Xid (PCI:0000:cb:00): 74, pid=22117, name=pt_main_thread, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
			f(health.ReasonNvidiaXID74Error, "0000:cb:00", "XID 74 (NVLink error) on GPU 0000:cb:00, pid 22117 (pt_main_thread): NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")},
		{"XID 119 GSP timeout", "NVRM: Xid (PCI:0000:9d:00): 119, pid=1234, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
			f(health.ReasonNvidiaXID119Error, "0000:9d:00", "XID 119 (GSP RPC timeout) on GPU 0000:9d:00, pid 1234 (nvidia-smi): Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")},
		{"old driver format without PCI: prefix", "NVRM: Xid (0000:03:00): 14, Channel 00000001",
			f(health.ReasonNvidiaXIDWarning, "0000:03:00", "XID 14 (unclassified XID) on GPU 0000:03:00: Channel 00000001")},
		{"MIG instance suffix", "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 95, pid=777, name=worker, Uncontained: SM (0x1). RST: Yes, D-RST: No",
			f(health.ReasonNvidiaXID95Error, "0000:01:00", "XID 95 (Uncontained ECC error) on GPU 0000:01:00, pid 777 (worker): Uncontained: SM (0x1). RST: Yes, D-RST: No")},
		{"syslog prefix before NVRM", "kernel: [1234567.890123] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
			f(health.ReasonNvidiaXID79Error, "0000:3b:00", "XID 79 (GPU has fallen off the bus) on GPU 0000:3b:00: GPU has fallen off the bus.")},
		{"XID 7 does not match the XID 79 rule", "NVRM: Xid (PCI:0000:3b:00): 7, Unused",
			f(health.ReasonNvidiaXIDWarning, "0000:3b:00", "XID 7 (unclassified XID) on GPU 0000:3b:00: Unused")},
		{"NCCL crash", "pt_main_thread[4242]: segfault at 8 ip 00007f1c2a3b4c5d sp 00007ffd1e2f3a40 error 4 in libnccl.so.2.21.5[7f1c2a000000+1e000000]",
			f(health.ReasonNvidiaNCCLError, "pt_main_thread", "pt_main_thread (PID 4242) crashed inside NCCL (libnccl)")},
		{"GPU announcement is not a fault", "NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae", nil},
		{"a segfault elsewhere is not NCCL", "python[1]: segfault at 0 ip 00007f00 sp 00007ffd error 4 in libc.so.6[7f00+1000]", nil},
		{"garbled XID", "NVRM: Xid (PCI:zzzz:3b:00): 79, GPU has fallen off the bus.", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := match(t, kmsg(tc.line))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("findings\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestXIDLinesOnlyFromKmsg(t *testing.T) {
	line := monitortest.Unit("myapp.service", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", t0)
	if got := match(t, line); got != nil {
		t.Fatalf("an application echoing an XID line must not count: %+v", got)
	}
}

// TestXIDTableDecisions pins the severities the issue and docs/accelerators.md
// decide: the critical set is Fatal, application-caused XIDs are Warnings,
// and every entry's reason is in the registry with the same severity.
func TestXIDTableDecisions(t *testing.T) {
	fatal := []int{46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158}
	app := []int{13, 31, 32, 43, 45, 68, 69, 137}
	prev := 0
	for _, x := range XIDTable() {
		if x.Code <= prev {
			t.Fatalf("table not in ascending order at XID %d", x.Code)
		}
		prev = x.Code
		r, ok := health.LookupReason(x.Reason)
		if !ok || r.Severity != x.Severity || r.Condition != health.AcceleratedHardwareReady || r.Source != health.FromLog {
			t.Fatalf("XID %d: registry entry %+v does not match table %+v", x.Code, r, x)
		}
		want := health.Warning
		if slices.Contains(fatal, x.Code) {
			want = health.Fatal
		}
		if x.Severity != want {
			t.Errorf("XID %d is %s, want %s", x.Code, x.Severity, want)
		}
	}
	for _, c := range append(fatal, app...) {
		if _, ok := LookupXID(c); !ok {
			t.Errorf("XID %d missing from the table", c)
		}
	}
	if xidReason(9999) != health.ReasonNvidiaXIDWarning {
		t.Fatal("unknown XIDs are Warnings")
	}
}

func TestParseXID(t *testing.T) {
	ev, ok := ParseXID("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.")
	want := XIDEvent{PCI: "0000:3b:00", Code: 79, PID: 1234, Process: "python", Detail: "GPU has fallen off the bus."}
	if !ok || ev != want {
		t.Fatalf("ParseXID = %+v, %v", ev, ok)
	}
	for _, bad := range []string{"", "NVRM: Xid (", "NVRM: Xid (PCI:0000:3b:00): , x", "NVRM: Xid (PCI:0000:3b:00): -1, x",
		"NVRM: Xid (PCI:0000:3b): 79, x", "NVRM: Xid PCI:0000:3b:00: 79"} {
		if ev, ok := ParseXID(bad); ok {
			t.Errorf("ParseXID(%q) = %+v, want no match", bad, ev)
		}
	}
}

func TestNormalizePCI(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3b:00": "0000:3b:00", "00000000:3B:00.0": "0000:3b:00", "0000:3b:00.0": "0000:3b:00", "0001:c1:1f": "0001:c1:1f",
	} {
		if got, ok := NormalizePCI(in); !ok || got != want {
			t.Errorf("NormalizePCI(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "3b:00", "0000:3b:20", "0000:3bb:00", "000000000:3b:00", "g000:3b:00", "0000::00"} {
		if got, ok := NormalizePCI(bad); ok {
			t.Errorf("NormalizePCI(%q) = %q, want rejection", bad, got)
		}
	}
}

func FuzzParseXID(f *testing.F) {
	for _, s := range []string{
		"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
		"NVRM: Xid (0000:03:00): 14, Channel 00000001",
		"NVRM: Xid (PCI:0000:01:00 GPU-I:05): 95, pid='<unknown>', name=<unknown>, x",
		"NVRM: Xid (PCI:0000:3b:00): 79",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ev, ok := ParseXID(s)
		if !ok {
			return
		}
		if ev.Code < 0 || ev.Code > 9999 || ev.PID < 0 {
			t.Fatalf("ParseXID(%q) = %+v", s, ev)
		}
		if p, ok := NormalizePCI(ev.PCI); !ok || p != ev.PCI {
			t.Fatalf("ParseXID(%q) returned a non-normalized PCI %q", s, ev.PCI)
		}
		_ = xidMessage(ev)
	})
}

func FuzzNormalizePCI(f *testing.F) {
	for _, s := range []string{"0000:3b:00", "00000000:3B:00.0", "ffffffff:ff:1f.7", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := NormalizePCI(s)
		if !ok {
			return
		}
		if again, ok := NormalizePCI(p); !ok || again != p {
			t.Fatalf("NormalizePCI not idempotent: %q → %q → %q", s, p, again)
		}
	})
}

// TestDocsListEveryXID keeps docs/accelerators.md in step with the table.
func TestDocsListEveryXID(t *testing.T) {
	data, err := os.ReadFile("../../../docs/accelerators.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range XIDTable() {
		row := fmt.Sprintf("| %d | %s | **%s** | `%s` |", x.Code, x.Name, x.Severity, x.Reason)
		if !strings.Contains(string(data), row) {
			t.Errorf("docs/accelerators.md lacks the row for XID %d: %q", x.Code, row)
		}
	}
}
