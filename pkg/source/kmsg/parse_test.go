package kmsg

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Record
	}{
		{
			name: "nvidia xid",
			in:   "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n",
			want: Record{Facility: 0, Level: 6, Seq: 1234, Monotonic: 5678901 * time.Microsecond, Flags: "-",
				Message: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."},
		},
		{
			name: "soft lockup with dictionary",
			in:   "4,987,123456,-;watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
			want: Record{Facility: 0, Level: 4, Seq: 987, Monotonic: 123456 * time.Microsecond, Flags: "-",
				Message: "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]",
				Dict:    map[string]string{"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}},
		},
		{
			name: "no trailing newline, continuation flag, extra header field",
			in:   "3,17,42,c,caller=T1234;EXT4-fs error (device nvme0n1p1): ext4_find_entry:1463: inode #2: comm ls: reading directory lblock 0",
			want: Record{Facility: 0, Level: 3, Seq: 17, Monotonic: 42 * time.Microsecond, Flags: "c",
				Message: "EXT4-fs error (device nvme0n1p1): ext4_find_entry:1463: inode #2: comm ls: reading directory lblock 0"},
		},
		{
			name: "user facility (written to /dev/kmsg by systemd)",
			in:   "30,555,9000000,-;systemd[1]: Started kubelet.service.\n",
			want: Record{Facility: 3, Level: 6, Seq: 555, Monotonic: 9 * time.Second, Flags: "-",
				Message: "systemd[1]: Started kubelet.service."},
		},
		{
			name: "escapes",
			in:   `6,1,1,-;tab\x09nl\x0abackslash\x5c utf8 \xc3\xa9 bad \xq1 end\x4` + "\n",
			want: Record{Level: 6, Seq: 1, Monotonic: time.Microsecond, Flags: "-",
				Message: "tab\tnl\nbackslash\\ utf8 é bad \\xq1 end\\x4"},
		},
		{
			name: "invalid utf-8, raw and escaped",
			in:   "6,2,1,-;raw \xff\xfe escaped \\xff end\n KEY=v\\xc3\n",
			want: Record{Level: 6, Seq: 2, Monotonic: time.Microsecond, Flags: "-",
				Message: "raw \uFFFD escaped \uFFFD end", Dict: map[string]string{"KEY": "v\uFFFD"}},
		},
		{
			name: "empty message",
			in:   "7,3,0,-;\n",
			want: Record{Level: 7, Seq: 3, Flags: "-"},
		},
		{
			name: "semicolons in the message",
			in:   "6,4,5,-;a;b;c=d\n",
			want: Record{Level: 6, Seq: 4, Monotonic: 5 * time.Microsecond, Flags: "-", Message: "a;b;c=d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse =\n%#v\nwant\n%#v", got, tt.want)
			}
			// Format gives the same record back.
			again, err := Parse(Format(got))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("Parse(Format()) = %#v, %v", again, err)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"",
		"\n",
		"6",
		"6,1234",
		"6,1234,5678901",
		"6,1234,5678901,-", // cut before ';'
		"6,1234,5678901;msg",
		"6,1234;msg",
		"6,1234,5678901,;msg",
		"x,1,2,-;msg",
		"-6,1,2,-;msg",
		"99999999,1,2,-;msg",
		"6,-1,2,-;msg",
		"6,1,x,-;msg",
		"6,1,99999999999999999999,-;msg",
		"6,1,9223372036854776,-;msg", // overflows a Duration in µs
		"6,1\n,2,-;msg",
		"6,1,2,-;msg\nSUBSYSTEM=pci\n",
		"6,1,2,-;msg\n SUBSYSTEM\n",
		"6,1,2,-;msg\n =pci\n",
		"6,1,2,-;msg\n\n SUBSYSTEM=pci\n",
	} {
		if rec, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%q) = %#v, want an error", in, rec)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error %v does not wrap ErrMalformed", in, err)
		}
	}
}

func TestParseLongMessage(t *testing.T) {
	msg := strings.Repeat("a", 1<<20)
	rec, err := Parse([]byte("4,1,1,-;" + msg + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Message != msg[:MaxMessageBytes] {
		t.Fatalf("message length %d, want %d", len(rec.Message), MaxMessageBytes)
	}

	// Escaped multi-byte runes cut at the limit stay valid UTF-8.
	esc := "4,1,1,-;" + strings.Repeat(`\xe2\x82\xac`, MaxMessageBytes) // €
	rec, err = Parse([]byte(esc))
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Message) > MaxMessageBytes || !utf8.ValidString(rec.Message) || len(rec.Message) < MaxMessageBytes-3 {
		t.Fatalf("message length %d valid %v", len(rec.Message), utf8.ValidString(rec.Message))
	}
}

func TestFormat(t *testing.T) {
	r := Record{Facility: 0, Level: 3, Seq: 7, Monotonic: 1500 * time.Millisecond, Message: "a\\b\nc é",
		Dict: map[string]string{"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}}
	got := string(Format(r))
	want := "3,7,1500000,-;a\\x5cb\\x0ac \\xc3\\xa9\n DEVICE=+pci:0000:3b:00.0\n SUBSYSTEM=pci\n"
	if got != want {
		t.Fatalf("Format = %q, want %q", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n",
		"4,987,123456,-;watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
		"3,17,42,c,caller=T1234;x",
		`6,1,1,-;\x09\x0a\x5c\xc3\xa9\xq1\x4`,
		"6,2,1,-;raw \xff\xfe\n KEY=v\\xc3\n",
		"6,1,2,-;msg\n\n",
		"6,1,2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rec, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if rec.Level < 0 || rec.Level > 7 || rec.Facility < 0 || rec.Monotonic < 0 {
			t.Fatalf("out of range: %#v", rec)
		}
		if len(rec.Message) > MaxMessageBytes || !utf8.ValidString(rec.Message) || !utf8.ValidString(rec.Flags) {
			t.Fatalf("bad message: len %d", len(rec.Message))
		}
		for k, v := range rec.Dict {
			if !utf8.ValidString(k) || !utf8.ValidString(v) || len(v) > MaxMessageBytes {
				t.Fatalf("bad dict entry %q", k)
			}
		}
		again, err := Parse(Format(rec))
		if err != nil {
			t.Fatalf("Parse(Format(%#v)): %v", rec, err)
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip:\n%#v\n%#v", rec, again)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	for _, bm := range []struct{ name, rec string }{
		{"plain", "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"},
		{"dict", "4,987,123456,-;watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"},
		{"escaped", `6,1,1,-;usb 1-1: Product: \xe2\x82\xac Device\x09rev 2` + "\n"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			in := []byte(bm.rec)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestOrigin: only facility 0 is the kernel's. The records are what the
// kernel makes of writes to /dev/kmsg (Documentation/ABI/testing/dev-kmsg,
// kernel/printk/printk.c devkmsg_write): no "<N>" prefix gives LOG_USER at
// the default level (12 = 1<<3|4), "<N>" with a facility keeps it (30 =
// daemon.info from systemd), and "<N>" naming only a level — facility 0,
// which would pass for the kernel's — is forced to LOG_USER too (14).
func TestOrigin(t *testing.T) {
	for _, tc := range []struct {
		in     string
		kernel bool
		fac    int
	}{
		{"6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n", true, 0},
		{"0,1,1,-;Kernel panic - not syncing: Fatal exception\n", true, 0},
		{"12,2,2,-;cgroup: fork rejected by pids controller in /system.slice/kubelet.service\n", false, 1},
		{"14,3,3,-;cgroup: fork rejected by pids controller in /system.slice/kubelet.service\n", false, 1},
		{"30,555,9000000,-;systemd[1]: Started kubelet.service.\n", false, 3},
		{"190,4,4,-;local7 message\n", false, 23},
	} {
		r, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if o := r.Origin(); o.Kernel != tc.kernel || o.Facility != tc.fac || o.Manager || o.Root {
			t.Errorf("%.30q: origin %+v, want kernel %v facility %d", tc.in, o, tc.kernel, tc.fac)
		}
	}
}
