package networking

import (
	"net"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/health"
)

// Links as netlink reports them on an EKS node (ip -d link): loopback, the
// primary ENA NIC, a pod's veth host end (eni...), and the VPC CNI's own.
func lo() linkInfo {
	return linkInfo{Name: "lo", Index: 1, Kind: "device", MAC: "00:00:00:00:00:00", Loopback: true, AdminUp: true, Running: true, OperState: "unknown"}
}

func ens5() linkInfo {
	return linkInfo{Name: "ens5", Index: 2, Kind: "device", MAC: "02:4c:1f:3a:9b:21", AdminUp: true, Running: true, OperState: "up",
		Addresses: []string{"10.0.12.34/19"}}
}

func podVeth() linkInfo {
	return linkInfo{Name: "eni3f2a1b4c5d6", Index: 7, Kind: "veth", MAC: "6e:1d:22:33:44:55", AdminUp: false, OperState: "down"}
}

func TestEvalInterfaces(t *testing.T) {
	defaultExclude := defaultExclusion()
	thr := ifaceThresholds{NotUp: 2, NotRunning: 2, Loopback: 2}
	down := func(l linkInfo) linkInfo { l.AdminUp, l.Running, l.OperState = false, false, "down"; return l }
	noCarrier := func(l linkInfo) linkInfo { l.Running, l.OperState = false, "down"; return l }
	unaddressed := func(l linkInfo) linkInfo { l.Addresses = nil; return l }
	named := func(l linkInfo, n string) linkInfo { l.Name = n; return l }
	bridge := func(ports int) linkInfo {
		return linkInfo{Name: "mybridge", Index: 9, Kind: "bridge", AdminUp: true, OperState: "down", Ports: ports, Addresses: []string{"10.239.0.1/24"}}
	}
	for _, tc := range []struct {
		name  string
		ticks [][]linkInfo
		// want is the findings of the last tick, "Reason/Subject,..."
		want string
	}{
		{name: "healthy node", ticks: [][]linkInfo{{lo(), ens5(), podVeth()}, {lo(), ens5(), podVeth()}}},
		{name: "a fresh namespace with loopback up", ticks: [][]linkInfo{{lo()}, {lo()}}},
		{
			name:  "an addressed NIC down twice",
			ticks: [][]linkInfo{{lo(), down(ens5())}, {lo(), down(ens5())}},
			want:  "InterfaceNotUp/ens5",
		},
		{
			name:  "an addressed NIC down once is not yet a fault",
			ticks: [][]linkInfo{{lo(), ens5()}, {lo(), down(ens5())}},
		},
		{
			name:  "down, up, down does not add up",
			ticks: [][]linkInfo{{lo(), down(ens5())}, {lo(), ens5()}, {lo(), down(ens5())}},
		},
		{
			name:  "a NIC seen up that lost its address when it went down",
			ticks: [][]linkInfo{{lo(), unaddressed(ens5())}, {lo(), down(unaddressed(ens5()))}, {lo(), down(unaddressed(ens5()))}},
			want:  "InterfaceNotUp/ens5",
		},
		{
			name:  "a NIC nobody configured is not expected up",
			ticks: [][]linkInfo{{lo(), down(unaddressed(ens5()))}, {lo(), down(unaddressed(ens5()))}, {lo(), down(unaddressed(ens5()))}},
		},
		{
			name:  "up without carrier",
			ticks: [][]linkInfo{{lo(), noCarrier(ens5())}, {lo(), noCarrier(ens5())}},
			want:  "InterfaceNotRunning/ens5",
		},
		{
			name:  "loopback down",
			ticks: [][]linkInfo{{down(lo()), ens5()}, {down(lo()), ens5()}},
			want:  "InterfaceNotUp/lo",
		},
		{
			name:  "loopback missing",
			ticks: [][]linkInfo{{ens5()}, {ens5()}},
			want:  "MissingLoopbackInterface/lo",
		},
		{
			name:  "excluded interfaces are not watched, whatever their state",
			ticks: [][]linkInfo{{lo(), ens5(), named(down(ens5()), "docker0"), named(noCarrier(ens5()), "cali12345")}, {lo(), ens5(), named(down(ens5()), "docker0"), named(noCarrier(ens5()), "cali12345")}},
		},
		{
			name:  "a vanished interface is forgotten",
			ticks: [][]linkInfo{{lo(), ens5(), named(ens5(), "ens6")}, {lo(), ens5()}, {lo(), ens5(), named(down(unaddressed(ens5())), "ens6")}},
		},
		{
			name:  "a bridge without ports has no carrier, by design",
			ticks: [][]linkInfo{{lo(), ens5(), bridge(0)}, {lo(), ens5(), bridge(0)}},
		},
		{
			name:  "a bridge with a port but no carrier",
			ticks: [][]linkInfo{{lo(), ens5(), bridge(1)}, {lo(), ens5(), bridge(1)}},
			want:  "InterfaceNotRunning/mybridge",
		},
		{
			name:  "two faults at once",
			ticks: [][]linkInfo{{lo(), down(ens5()), named(noCarrier(ens5()), "ens6")}, {lo(), down(ens5()), named(noCarrier(ens5()), "ens6")}},
			want:  "InterfaceNotUp/ens5,InterfaceNotRunning/ens6",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st ifaceState
			var got string
			for i, links := range tc.ticks {
				var fs []string
				next, findings := evalInterfaces(st, netSnapshot{Links: links, DefaultRoutes: 1}, defaultExclude, thr, t0.Add(time.Duration(i)*time.Minute))
				st = next
				for _, f := range findings {
					fs = append(fs, f.Reason+"/"+f.Subject)
					if !f.Observed.Equal(t0.Add(time.Duration(i) * time.Minute)) {
						t.Errorf("observed %v", f.Observed)
					}
				}
				got = strings.Join(fs, ",")
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInterfaceMessageIsStable: the message of a standing Fatal fault must
// not change between checks, or every check rewrites the condition.
func TestInterfaceMessageIsStable(t *testing.T) {
	ex := defaultExclusion()
	l := ens5()
	l.AdminUp, l.Running = false, false
	var st ifaceState
	var msgs []string
	for i := range 4 {
		var fs []string
		next, findings := evalInterfaces(st, netSnapshot{Links: []linkInfo{lo(), l}}, ex, ifaceThresholds{2, 2, 2}, t0.Add(time.Duration(i)*time.Minute))
		st = next
		for _, f := range findings {
			fs = append(fs, f.Message)
		}
		msgs = append(msgs, strings.Join(fs, ""))
	}
	if msgs[1] == "" || msgs[1] != msgs[2] || msgs[2] != msgs[3] {
		t.Fatalf("messages change: %q", msgs)
	}
	if want := "interface ens5 is administratively down (kind device, MAC 02:4c:1f:3a:9b:21, addresses 10.0.12.34/19) for at least 2 consecutive checks"; msgs[3] != want {
		t.Fatalf("message %q\nwant %q", msgs[3], want)
	}
}

func TestDefaultExclusions(t *testing.T) {
	ex := defaultExclusion()
	for _, name := range []string{"veth1a2b3c", "cali8d7e6f5a4b3", "lxc_health", "lxc1234", "docker0", "br-0123abcd4567", "cni0",
		"flannel.1", "vxlan.calico", "tunl0", "kube-ipvs0", "nodelocaldns", "ifb0", "cilium_host", "cilium_vxlan", "eni3f2a1b4c5d6", "vlan.eth.1",
		// InfiniBand by name, as the EKS Node Monitoring Agent, and the
		// fallback devices tunnel modules create in every namespace.
		"ib0", "ib0.8001", "ibp26s0", "ibs2", "gre0", "gretap0", "erspan0", "ip6gre0", "ip6tnl0", "sit0", "ip_vti0", "ip6_vti0"} {
		if !ex.names.MatchString(name) {
			t.Errorf("%s should be excluded", name)
		}
	}
	for _, name := range []string{"eth0", "ens5", "ens6", "enp0s3", "eno1", "bond0", "lo", "eni", "eth0.100", "mybridge"} {
		if ex.names.MatchString(name) {
			t.Errorf("%s should be watched", name)
		}
	}
}

func TestEvalDefaultRoute(t *testing.T) {
	ex := defaultExclusion()
	for _, tc := range []struct {
		name string
		snap netSnapshot
		want bool
	}{
		{"default route present", netSnapshot{Links: []linkInfo{lo(), ens5()}, DefaultRoutes: 1}, false},
		{"addressed NIC without default route", netSnapshot{Links: []linkInfo{lo(), ens5()}}, true},
		{"only loopback", netSnapshot{Links: []linkInfo{lo()}}, false},
		{"unaddressed NIC", netSnapshot{Links: []linkInfo{lo(), {Name: "ens6", AdminUp: true, Running: true}}}, false},
		{"addresses only on excluded links", netSnapshot{Links: []linkInfo{lo(), {Name: "docker0", AdminUp: true, Running: true, Addresses: []string{"172.17.0.1/16"}}}}, false},
		{"addressed NIC that is down (InterfaceNotUp's business)", netSnapshot{Links: []linkInfo{lo(), {Name: "ens5", Addresses: []string{"10.0.0.5/24"}}}}, false},
	} {
		got := evalDefaultRoute(tc.snap, ex, t0)
		if (len(got) == 1) != tc.want || len(got) > 1 {
			t.Errorf("%s: got %v", tc.name, got)
		}
		if len(got) == 1 && (got[0].Reason != health.ReasonMissingDefaultRoutes || !strings.Contains(got[0].Message, "ens5 10.0.12.34/19")) {
			t.Errorf("%s: finding %+v", tc.name, got[0])
		}
	}
}

func TestIsDefault(t *testing.T) {
	_, v4, _ := net.ParseCIDR("0.0.0.0/0")
	_, v6, _ := net.ParseCIDR("::/0")
	_, sub, _ := net.ParseCIDR("10.0.0.0/8")
	_, host, _ := net.ParseCIDR("0.0.0.0/32")
	if !isDefault(nil) || !isDefault(v4) || !isDefault(v6) || isDefault(sub) || isDefault(host) {
		t.Fatal("isDefault")
	}
}

// TestInterfacesInRealNetNS drives InterfaceNotUp and InterfaceNotRunning
// end to end through real netlink: a namespace this test creates, a veth
// pair brought up and down with netlink, the check reading it through the
// NetNS option under a fake host root.
func TestInterfacesInRealNetNS(t *testing.T) {
	ns := netnstest.New(t)
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{NetNS: "/run/netns/node"})
	check := monitortest.Stepper(t, m, "net-interfaces", clk, 30*time.Second)

	// A fresh namespace: only loopback, and it is down.
	check("")
	check("InterfaceNotUp/lo")
	ns.Up("lo")
	check("") // a clean namespace with loopback up raises nothing

	ns.AddVeth("ens5", "ens6")
	ns.AddAddr("ens5", "192.0.2.10/24")
	ns.Up("ens5", "ens6")
	ns.WaitRunning("ens5", true)
	ns.WaitRunning("ens6", true)
	ns.AddDefaultRoute("ens5", "192.0.2.1")
	check("")
	check("")

	// The peer goes down: ens6 is down (it was up), ens5 loses its carrier.
	ns.Down("ens6")
	ns.WaitRunning("ens5", false)
	check("")
	check("InterfaceNotUp/ens6,InterfaceNotRunning/ens5")
	check("InterfaceNotUp/ens6,InterfaceNotRunning/ens5")

	ns.Up("ens6")
	ns.WaitRunning("ens5", true)
	ns.WaitRunning("ens6", true)
	check("")

	// ens5 administratively down: it carries an address, so it is meant up;
	// its peer loses the carrier. The kernel drops the default route with the
	// link, but with no running addressed link left there is nothing to route.
	ns.Down("ens5")
	ns.WaitRunning("ens6", false)
	check("")
	check("InterfaceNotRunning/ens6,InterfaceNotUp/ens5")
	ns.Up("ens5")
	ns.WaitRunning("ens5", true)
	ns.WaitRunning("ens6", true)
	check("MissingDefaultRoutes") // the kernel dropped the route with the link
	ns.AddDefaultRoute("ens5", "192.0.2.1")
	check("")
}

func TestInterfacesBadExclusionPattern(t *testing.T) {
	m := New(testEnv(hostroot.New(t), clocktesting.NewFakePassiveClock(t0), nil), Options{ExcludeInterfaces: "veth(("})
	if _, err := runCheck(t, m, "net-interfaces"); err == nil || !strings.Contains(err.Error(), "invalid interface exclusion pattern") {
		t.Fatalf("got %v", err)
	}
}
