package storage

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

func TestParsePSI(t *testing.T) {
	p, err := parsePSI([]byte("some avg10=0.15 avg60=0.18 avg300=0.58 total=23346399\nfull avg10=0.00 avg60=0.07 avg300=0.21 total=8373681\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Some.Avg60 != 0.18 || p.Full.Avg300 != 0.21 || p.Full.Total != 8373681 || !p.HasFull {
		t.Fatalf("%+v", p)
	}
	for _, bad := range []string{"", "full avg10=1 avg60=2 avg300=3 total=4\n", "some avg10=x\n", "some avg10=101\n", "some avg10\n", "sometimes avg10=1\n", "some avg10=NaN\n"} {
		if _, err := parsePSI([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestIOPressureCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*hostroot.Root)
		want    string
		wantErr bool
	}{
		{name: "quiet", setup: func(r *hostroot.Root) { r.SetPSI("io", [3]float64{0.15, 0.18, 0.58}, [3]float64{0, 0.07, 0.21}) }},
		{
			name:  "stalled on I/O a quarter of the last minute",
			setup: func(r *hostroot.Root) { r.SetPSI("io", [3]float64{61.2, 48.9, 20.1}, [3]float64{35.4, 25.3, 9.8}) },
			want:  "all non-idle tasks were stalled on I/O 25.3% of the last minute (PSI io full avg60; avg10 35.4%, avg300 9.8%; some avg60 48.9%); threshold 20%",
		},
		{name: "one busy task (some) alone", setup: func(r *hostroot.Root) { r.SetPSI("io", [3]float64{90, 80, 70}, [3]float64{1, 2, 3}) }},
		{name: "kernel without PSI"},
		{name: "garbage", setup: func(r *hostroot.Root) { r.WriteFile("proc/pressure/io", "pressure: high\n") }, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t)
			if tc.setup != nil {
				tc.setup(root)
			}
			m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
			fs, err := runCheck(t, m, "storage-io-pressure")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			switch {
			case tc.want == "" && len(fs) != 0:
				t.Fatalf("%v", fs)
			case tc.want != "" && (len(fs) != 1 || fs[0].Message != tc.want || fs[0].Reason != health.ReasonIODelays):
				t.Fatalf("%v, want %q", fs, tc.want)
			}
		})
	}
}

// TestPSIThisMachine runs the I/O pressure check against this machine's
// kernel. With PSI, its /proc/pressure/io must parse and the check must
// succeed; without it (no CONFIG_PSI, or booted with psi=0) the check must
// report nothing and no error — the two behaviours the agent has on real
// nodes, whichever this machine shows.
func TestPSIThisMachine(t *testing.T) {
	m := New(detection.Env{HostRoot: "/"}, Options{})
	fs, err := m.runIOPressure(t.Context())
	data, readErr := os.ReadFile("/proc/pressure/io")
	if errors.Is(readErr, os.ErrNotExist) || errors.Is(readErr, unix.EOPNOTSUPP) {
		if err != nil || len(fs) != 0 {
			t.Fatalf("kernel without PSI: check = %v, %v; want nothing", fs, err)
		}
		t.Logf("this kernel has no PSI: the check reports nothing")
		return
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	if err != nil {
		t.Fatalf("check on this kernel's PSI: %v", err)
	}
	p, err := parsePSI(data)
	if err != nil || !p.HasFull {
		t.Fatalf("%+v, %v", p, err)
	}
	t.Logf("this machine: %+v (findings %v)", p, fs)
}

// ebsPage builds log page 0xD0 of an EBS volume as the Amazon EBS User
// Guide ("Amazon EBS detailed performance statistics") and nvme-cli's amzn
// plugin lay it out: 4096 bytes, little-endian u64 fields from offset 0
// (magic 0x3C23B510, read ops, write ops, read bytes, write bytes, read time,
// write time, then the four "performance exceeded" times in µs: volume
// IOPS, volume throughput, instance IOPS, instance throughput, then the
// queue length), 416 reserved bytes, and the read and write latency
// histograms (a u64 bin count and 64 bins of lower, upper, count).
func ebsPage(volIOPS, volTP, instIOPS, instTP uint64) []byte {
	b := make([]byte, ebsLogPageLen)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	put(0, ebsMagic)
	put(8, 1_204_554)          // total_read_ops
	put(16, 9_810_332)         // total_write_ops
	put(24, 29_364_011_008)    // total_read_bytes
	put(32, 301_989_888_000)   // total_write_bytes
	put(40, 812_004_113)       // total_read_time µs
	put(48, 4_100_228_901)     // total_write_time µs
	put(56, volIOPS)           // ebs_volume_performance_exceeded_iops
	put(64, volTP)             // ebs_volume_performance_exceeded_tp
	put(72, instIOPS)          // ec2_instance_ebs_performance_exceeded_iops
	put(80, instTP)            // ec2_instance_ebs_performance_exceeded_tp
	put(88, 2)                 // volume_queue_length
	hist := ebsFieldsLen + 416 // read latency histogram
	put(hist, 3)
	for i, bin := range [][3]uint64{{0, 128, 900_000}, {128, 256, 250_000}, {256, 512, 54_554}} {
		put(hist+8+i*24, bin[0])
		put(hist+16+i*24, bin[1])
		put(hist+24+i*24, bin[2])
	}
	return b
}

func TestParseEBSLogPage(t *testing.T) {
	st, err := parseEBSLogPage(ebsPage(10, 20, 30, 40))
	if err != nil {
		t.Fatal(err)
	}
	want := ebsStats{ReadOps: 1_204_554, WriteOps: 9_810_332, ReadBytes: 29_364_011_008, WriteBytes: 301_989_888_000,
		ReadTimeMicros: 812_004_113, WriteTimeMicros: 4_100_228_901, VolumeIOPSExceeded: 10, VolumeTPExceeded: 20,
		InstanceIOPSExceeded: 30, InstanceTPExceeded: 40, QueueLength: 2}
	if st != want {
		t.Fatalf("got %+v\nwant %+v", st, want)
	}
	// An instance store volume answers log page 0xD0 with its own magic.
	store := ebsPage(0, 0, 0, 0)
	binary.LittleEndian.PutUint64(store, 0xEC2C0D7E)
	if _, err := parseEBSLogPage(store); err == nil || !strings.Contains(err.Error(), "0xEC2C0D7E") {
		t.Fatalf("instance store page: %v", err)
	}
	if _, err := parseEBSLogPage(ebsPage(0, 0, 0, 0)[:95]); err == nil {
		t.Fatal("short page accepted")
	}
}

// fakeNVMe serves log pages per controller device, optionally blocking.
type fakeNVMe struct {
	mu    sync.Mutex
	pages map[string][]byte
	block chan struct{}
	reads int
}

func (f *fakeNVMe) set(dev string, page []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pages == nil {
		f.pages = map[string][]byte{}
	}
	f.pages[dev] = page
}

func (f *fakeNVMe) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeNVMe) ReadLogPage(device string, id uint8, buf []byte) error {
	f.mu.Lock()
	f.reads++
	block := f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	if id != ebsLogPageID {
		return errors.New("unexpected log page")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pages[device]
	if !ok {
		return unix.ENOENT
	}
	copy(buf, p)
	return nil
}

func ebsRoot(t *testing.T) *hostroot.Root {
	root := hostroot.New(t)
	root.AddNVMeController("nvme0", "Amazon Elastic Block Store", "vol0123456789abcdef0")
	root.AddNVMeController("nvme1", "Amazon Elastic Block Store", "vol0fedcba9876543210")
	root.AddNVMeController("nvme2", "Amazon EC2 NVMe Instance Storage", "AWS1A2B3C4D5E6F7G8H")
	return root
}

// TestEBSCheckKeepsStateAcrossTicks: a first reading is a baseline, growing
// counters fire, equal ones do not; instance store volumes are not read.
func TestEBSCheckKeepsStateAcrossTicks(t *testing.T) {
	root := ebsRoot(t)
	nvme := &fakeNVMe{}
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{LogPages: nvme})
	tick := func(p0, p1 []byte, want string) {
		t.Helper()
		nvme.set(root.Path("dev/nvme0"), p0)
		nvme.set(root.Path("dev/nvme1"), p1)
		fs, err := runCheck(t, m, "storage-ebs")
		if err != nil {
			t.Fatal(err)
		}
		if got := reasons(fs); got != want {
			t.Fatalf("got %q, want %q (%v)", got, want, fs)
		}
		clk.SetTime(clk.Now().Add(time.Minute))
	}
	tick(ebsPage(5_000_000, 0, 0, 0), ebsPage(0, 0, 0, 0), "") // baseline, whatever the totals
	tick(ebsPage(5_000_000, 0, 0, 0), ebsPage(0, 0, 0, 0), "")
	tick(ebsPage(5_250_000, 0, 0, 0), ebsPage(0, 10, 0, 0), "EBSVolumeIOPSExceeded/vol-0123456789abcdef0,EBSVolumeThroughputExceeded/vol-0fedcba9876543210")
	tick(ebsPage(5_250_000, 0, 1, 1), ebsPage(0, 10, 0, 0), "EBSInstanceIOPSExceeded/vol-0123456789abcdef0,EBSInstanceThroughputExceeded/vol-0123456789abcdef0")
	tick(ebsPage(0, 0, 0, 0), ebsPage(0, 10, 0, 0), "") // reattached: counters reset
	nvme.set(root.Path("dev/nvme0"), ebsPage(250_000, 0, 0, 0))
	fs, _ := runCheck(t, m, "storage-ebs")
	if want := "EBS volume vol-0123456789abcdef0 (nvme0): IOPS demand exceeded the volume's provisioned IOPS for 250ms since the last check (ebs_volume_performance_exceeded_iops 0 → 250000 µs); I/O was throttled"; len(fs) != 1 || fs[0].Message != want {
		t.Fatalf("%v", fs)
	}
	if n := nvme.readCount(); n != 12 {
		t.Fatalf("%d log page reads, want 2 per check (the instance store volume is not read)", n)
	}
}

func TestEBSThreshold(t *testing.T) {
	root := ebsRoot(t)
	nvme := &fakeNVMe{}
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), map[string]float64{health.ReasonEBSVolumeIOPSExceeded: 1_000_000}), Options{LogPages: nvme})
	for _, tc := range []struct {
		v    uint64
		want string
	}{{0, ""}, {999_999, ""}, {1_999_998, ""}, {2_999_998, "EBSVolumeIOPSExceeded/vol-0123456789abcdef0"}} {
		nvme.set(root.Path("dev/nvme0"), ebsPage(tc.v, 0, 0, 0))
		nvme.set(root.Path("dev/nvme1"), ebsPage(0, 0, 0, 0))
		fs, err := runCheck(t, m, "storage-ebs")
		if err != nil || reasons(fs) != tc.want {
			t.Fatalf("%d: %v, %v", tc.v, reasons(fs), err)
		}
	}
}

func TestNoEBSIsNothing(t *testing.T) {
	m := New(testEnv(hostroot.New(t), clocktesting.NewFakePassiveClock(t0), nil), Options{LogPages: &fakeNVMe{}})
	if fs, err := runCheck(t, m, "storage-ebs"); err != nil || len(fs) != 0 {
		t.Fatalf("%v %v", fs, err)
	}
}

// TestStuckNVMeIoctl: a controller whose admin queue hangs blocks only its
// own reads; the check reports the others and returns in time.
func TestStuckNVMeIoctl(t *testing.T) {
	root := ebsRoot(t)
	nvme := &fakeNVMe{block: make(chan struct{})}
	nvme.set(root.Path("dev/nvme0"), ebsPage(0, 0, 0, 0))
	nvme.set(root.Path("dev/nvme1"), ebsPage(0, 0, 0, 0))
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{LogPages: nvme, ProbeTimeout: 50 * time.Millisecond})
	start := time.Now()
	_, err := runCheck(t, m, "storage-ebs")
	var stuck *bounded.StuckError
	if !errors.As(err, &stuck) {
		t.Fatalf("want a timeout error, got %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("the check waited past its timeouts")
	}
	_, err = runCheck(t, m, "storage-ebs")
	if !errors.As(err, &stuck) || !stuck.Earlier {
		t.Fatalf("want 'still blocked', got %v", err)
	}
	if n := nvme.readCount(); n != 2 {
		t.Fatalf("%d reads: a stuck controller was read again", n)
	}
	close(nvme.block)
}

func TestNVMeAdminErrors(t *testing.T) {
	if err := (NVMeAdmin{}).ReadLogPage("/nonexistent/nvme9", ebsLogPageID, make([]byte, 4096)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
	// A regular file is not an NVMe controller: the ioctl is refused.
	f := t.TempDir() + "/nvme0"
	os.WriteFile(f, nil, 0o600)
	if err := (NVMeAdmin{}).ReadLogPage(f, ebsLogPageID, make([]byte, 4096)); !errors.Is(err, unix.ENOTTY) {
		t.Fatalf("got %v", err)
	}
	if err := (NVMeAdmin{}).ReadLogPage(f, ebsLogPageID, make([]byte, 7)); err == nil {
		t.Fatal("odd buffer accepted")
	}
}

func TestVolumeID(t *testing.T) {
	for in, want := range map[string]string{"vol0123456789abcdef0": "vol-0123456789abcdef0", "vol-0abc": "vol-0abc", "AWS123": "AWS123", "vol": "vol"} {
		if got := volumeID(in); got != want {
			t.Errorf("volumeID(%q) = %q", in, got)
		}
	}
}
