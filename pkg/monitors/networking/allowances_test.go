package networking

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/health"
)

// enaStats is `ethtool -S ens5` of an ENA interface (driver 2.8, the
// counters the Amazon EC2 User Guide documents under "Network performance
// metrics"), trimmed to the device-level statistics.
func enaStats(bwIn, bwOut, pps, conntrack, linklocal uint64) map[string]uint64 {
	return map[string]uint64{
		"total_resets":                  0,
		"reset_fail":                    0,
		"tx_timeout":                    0,
		"suspend":                       0,
		"resume":                        0,
		"wd_expired":                    0,
		"interface_up":                  1,
		"interface_down":                0,
		"admin_q_pause":                 0,
		"bw_in_allowance_exceeded":      bwIn,
		"bw_out_allowance_exceeded":     bwOut,
		"pps_allowance_exceeded":        pps,
		"conntrack_allowance_available": 391528,
		"conntrack_allowance_exceeded":  conntrack,
		"linklocal_allowance_exceeded":  linklocal,
		"queue_0_tx_cnt":                2890213,
		"queue_0_rx_cnt":                3119421,
	}
}

// fakeStats serves fixture statistics per interface; interfaces without an
// entry answer EOPNOTSUPP, like lo.
type fakeStats struct {
	mu    sync.Mutex
	stats map[string]map[string]uint64
	// block, when set, makes Stats wait on it: a driver stuck behind rtnl.
	block chan struct{}
	opens int
}

func (f *fakeStats) set(iface string, s map[string]uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stats == nil {
		f.stats = map[string]map[string]uint64{}
	}
	f.stats[iface] = s
}

func (f *fakeStats) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens
}

func (f *fakeStats) Open() (StatsReader, error) {
	f.mu.Lock()
	f.opens++
	f.mu.Unlock()
	return fakeReader{f}, nil
}

type fakeReader struct{ f *fakeStats }

func (r fakeReader) Stats(iface string) (map[string]uint64, error) {
	if r.f.block != nil {
		<-r.f.block
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	s, ok := r.f.stats[iface]
	if !ok {
		return nil, unix.EOPNOTSUPP
	}
	return maps.Clone(s), nil
}

func (fakeReader) Close() {}

func TestEvalAllowances(t *testing.T) {
	k := func(stat string) counterKey { return counterKey{"ens5", stat} }
	one := map[string]float64{}
	for _, r := range allowanceReasons() {
		one[r] = 1
	}
	for _, tc := range []struct {
		name      string
		prev, cur map[counterKey]uint64
		thr       map[string]float64
		want      string
	}{
		{name: "first reading is a baseline", prev: nil, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}},
		{name: "equal counters", prev: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}},
		{name: "increase", prev: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 5001}, want: "PPSExceeded/ens5"},
		{name: "reset to zero is a new baseline", prev: map[counterKey]uint64{k("bw_in_allowance_exceeded"): 5000}, cur: map[counterKey]uint64{k("bw_in_allowance_exceeded"): 3}},
		{
			name: "every counter",
			prev: map[counterKey]uint64{k("bw_in_allowance_exceeded"): 1, k("bw_out_allowance_exceeded"): 1, k("pps_allowance_exceeded"): 1, k("conntrack_allowance_exceeded"): 1, k("linklocal_allowance_exceeded"): 1},
			cur:  map[counterKey]uint64{k("bw_in_allowance_exceeded"): 2, k("bw_out_allowance_exceeded"): 2, k("pps_allowance_exceeded"): 2, k("conntrack_allowance_exceeded"): 2, k("linklocal_allowance_exceeded"): 2},
			want: "BandwidthInExceeded/ens5,BandwidthOutExceeded/ens5,ConntrackExceeded/ens5,LinkLocalExceeded/ens5,PPSExceeded/ens5",
		},
		{
			name: "below a configured threshold",
			prev: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 5099},
			thr: map[string]float64{health.ReasonPPSExceeded: 100},
		},
		{
			name: "at a configured threshold",
			prev: map[counterKey]uint64{k("pps_allowance_exceeded"): 5000}, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 5100},
			thr: map[string]float64{health.ReasonPPSExceeded: 100}, want: "PPSExceeded/ens5",
		},
		{
			name: "another interface's counter is another counter",
			prev: map[counterKey]uint64{{"ens6", "pps_allowance_exceeded"}: 5000}, cur: map[counterKey]uint64{k("pps_allowance_exceeded"): 9000},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			thr := maps.Clone(one)
			maps.Copy(thr, tc.thr)
			next, fs := evalAllowances(tc.prev, tc.cur, thr, t0)
			if got := reasons(fs); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if !maps.Equal(next, tc.cur) {
				t.Fatalf("next reading %v, want the current one", next)
			}
		})
	}
	_, fs := evalAllowances(map[counterKey]uint64{k("bw_in_allowance_exceeded"): 10}, map[counterKey]uint64{k("bw_in_allowance_exceeded"): 25}, one, t0)
	if want := "bw_in_allowance_exceeded on ens5 increased by 15 since the last check (10 → 25): packets were queued or dropped because inbound aggregate bandwidth exceeded the instance's allowance"; fs[0].Message != want {
		t.Fatalf("message %q", fs[0].Message)
	}
}

// allowanceMonitor is a monitor inspecting a fresh namespace with one ENA-like
// interface, ens5 (a veth: the links are real, the ENA counters fixtures).
func allowanceMonitor(t *testing.T, stats *fakeStats) (*Monitor, *clocktesting.FakePassiveClock) {
	t.Helper()
	ns := netnstest.New(t)
	ns.AddVeth("ens5", "ens6")
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	clk := clocktesting.NewFakePassiveClock(t0)
	return New(testEnv(root, clk, nil), Options{NetNS: "/run/netns/node", Stats: stats, ProbeTimeout: time.Second}), clk
}

// TestAllowancesKeepStateAcrossTicks is the reason the counters live in the
// monitor: two checks with increasing counters fire, equal counters do not,
// and the very first check never does.
func TestAllowancesKeepStateAcrossTicks(t *testing.T) {
	stats := &fakeStats{}
	m, clk := allowanceMonitor(t, stats)
	tick := func(s map[string]uint64, want string) {
		t.Helper()
		stats.set("ens5", s)
		fs, err := runCheck(t, m, "net-ena-allowances")
		if err != nil {
			t.Fatal(err)
		}
		if got := reasons(fs); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		clk.SetTime(clk.Now().Add(30 * time.Second))
	}
	tick(enaStats(100, 200, 3000, 0, 7), "")                 // baseline: a node that has been busy for weeks
	tick(enaStats(100, 200, 3000, 0, 7), "")                 // equal
	tick(enaStats(100, 200, 3250, 0, 7), "PPSExceeded/ens5") // pps grew
	tick(enaStats(100, 200, 3250, 0, 7), "")                 // and stopped
	tick(enaStats(101, 200, 3250, 4, 7), "BandwidthInExceeded/ens5,ConntrackExceeded/ens5")
	tick(enaStats(0, 0, 0, 0, 0), "") // driver reset: new baseline
	tick(enaStats(0, 0, 0, 0, 9), "LinkLocalExceeded/ens5")
	if stats.openCount() != 7 {
		t.Fatalf("opened %d readers for 7 checks: want one per check, closed after it", stats.openCount())
	}
}

// TestFreshMonitorPerTickNeverFires shows why: a monitor built anew for each
// check (a fresh reader every tick) never sees an increase.
func TestFreshMonitorPerTickNeverFires(t *testing.T) {
	stats := &fakeStats{}
	m, _ := allowanceMonitor(t, stats)
	for _, v := range []uint64{3000, 3250, 9000} {
		stats.set("ens5", enaStats(0, 0, v, 0, 0))
		fresh := New(m.env, m.opts)
		if fs, err := runCheck(t, fresh, "net-ena-allowances"); err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
}

// TestStuckStatsReadDoesNotWedge uses a blocking fake for an ethtool ioctl
// stuck behind a wedged driver: the check returns an error within the probe
// timeout, the next one at once without a second stuck read, and the check
// recovers when the read returns.
func TestStuckStatsReadDoesNotWedge(t *testing.T) {
	stats := &fakeStats{block: make(chan struct{})}
	stats.set("ens5", enaStats(0, 0, 0, 0, 0))
	m, _ := allowanceMonitor(t, stats)
	start := time.Now()
	_, err := runCheck(t, m, "net-ena-allowances")
	var stuck *bounded.StuckError
	if !errors.As(err, &stuck) || stuck.Earlier {
		t.Fatalf("want a timeout, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the check took %v with a 1s probe timeout", d)
	}
	if _, err := runCheck(t, m, "net-ena-allowances"); !errors.As(err, &stuck) || !stuck.Earlier {
		t.Fatalf("want 'still blocked', got %v", err)
	}
	if n := stats.openCount(); n != 1 {
		t.Fatalf("a second read was started while the first is stuck (%d opens)", n)
	}
	close(stats.block)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := runCheck(t, m, "net-ena-allowances")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check did not recover: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEthtoolStatsRealIoctl reads statistics through the real
// ETHTOOL_GSTATS ioctl in a namespace the test creates: veth exposes driver
// statistics (peer_ifindex, per-queue XDP counters), loopback none.
func TestEthtoolStatsRealIoctl(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddVeth("ens5", "ens6")
	var got map[string]uint64
	err := netNS{path: ns.Path}.run(func() error {
		r, err := EthtoolStats{}.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		got, err = r.Stats("ens5")
		if err != nil {
			return err
		}
		if _, err := r.Stats("nonexistent0"); !noStats(err) {
			return fmt.Errorf("a missing interface: %v, want ENODEV", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peer, ok := got["peer_ifindex"]; !ok || peer == 0 {
		t.Fatalf("veth statistics without peer_ifindex: %v", got)
	}
	t.Logf("%d veth statistics, e.g. peer_ifindex=%d", len(got), got["peer_ifindex"])
}

// TestAllowancesRealIoctlNoENA runs the check with the real ioctl over real
// interfaces that are not ENA: nothing to report, no error.
func TestAllowancesRealIoctlNoENA(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddVeth("ens5", "ens6")
	ns.Up("lo", "ens5", "ens6")
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{NetNS: "/run/netns/node"})
	for range 2 {
		fs, err := runCheck(t, m, "net-ena-allowances")
		if err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
	if len(m.counters) != 0 {
		t.Fatalf("counters of a non-ENA interface: %v", m.counters)
	}
	if !strings.Contains(strings.Join(allowanceReasons(), ","), "LinkLocalExceeded") {
		t.Fatal("allowance reasons")
	}
}
