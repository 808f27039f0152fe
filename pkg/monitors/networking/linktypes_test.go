package networking

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/detection"
)

// tunnelLink is a tunnel or virtual device as a test creates it, and what the
// kernel says of it: its hardware type (ifi_type: dev->type the driver sets
// in its setup function) and its kind (rtnl_link_ops.kind).
type tunnelLink struct {
	kind   string
	hwType uint16
	// make is the netlink request that creates it; nil for devices made
	// with ip tuntap (a TUN/TAP device is made with an ioctl on /dev/net/tun
	// in the creating thread's namespace, not over netlink).
	make func(name string) netlink.Link
	// tuntap is ip tuntap's mode.
	tuntap string
}

var (
	v4a, v4b = net.ParseIP("192.0.2.1"), net.ParseIP("192.0.2.2")
	v6a, v6b = net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8::2")
)

// tunnelLinks are the tunnels and virtual devices of DefaultExcludeLinkTypes
// with the hardware types of their drivers: net/ipv4/ip_gre.c (ipgre_tunnel_setup:
// ARPHRD_IPGRE; gretap and erspan are Ethernet), net/ipv6/sit.c
// (ARPHRD_SIT), net/ipv4/ipip.c and ip_vti.c (ARPHRD_TUNNEL),
// net/ipv6/ip6_tunnel.c (ARPHRD_TUNNEL6), net/ipv6/ip6_gre.c
// (ARPHRD_IP6GRE), drivers/net/vxlan, geneve.c, tun.c (TUN: ARPHRD_NONE,
// TAP: Ethernet), wireguard (ARPHRD_NONE), dummy.c and ifb.c (Ethernet).
var tunnelLinks = []tunnelLink{
	{kind: "gre", hwType: unix.ARPHRD_IPGRE, make: func(n string) netlink.Link {
		return &netlink.Gretun{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v4a, Remote: v4b}
	}},
	{kind: "gretap", hwType: unix.ARPHRD_ETHER, make: func(n string) netlink.Link {
		return &netlink.Gretap{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v4a, Remote: v4b}
	}},
	{kind: "ip6gre", hwType: unix.ARPHRD_IP6GRE, make: func(n string) netlink.Link {
		return &netlink.Gretun{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v6a, Remote: v6b}
	}},
	{kind: "sit", hwType: unix.ARPHRD_SIT, make: func(n string) netlink.Link {
		return &netlink.Sittun{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v4a, Remote: v4b}
	}},
	{kind: "ipip", hwType: unix.ARPHRD_TUNNEL, make: func(n string) netlink.Link {
		return &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v4a, Remote: v4b}
	}},
	{kind: "vti", hwType: unix.ARPHRD_TUNNEL, make: func(n string) netlink.Link {
		return &netlink.Vti{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v4a, Remote: v4b, IKey: 7, OKey: 7}
	}},
	{kind: "ip6tnl", hwType: unix.ARPHRD_TUNNEL6, make: func(n string) netlink.Link {
		return &netlink.Ip6tnl{LinkAttrs: netlink.LinkAttrs{Name: n}, Local: v6a, Remote: v6b}
	}},
	{kind: "vxlan", hwType: unix.ARPHRD_ETHER, make: func(n string) netlink.Link {
		return &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: n}, VxlanId: 42, Port: 4789}
	}},
	{kind: "geneve", hwType: unix.ARPHRD_ETHER, make: func(n string) netlink.Link {
		return &netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: n}, ID: 42, Remote: v4b}
	}},
	{kind: "wireguard", hwType: unix.ARPHRD_NONE, make: func(n string) netlink.Link {
		return &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: n}}
	}},
	{kind: "dummy", hwType: unix.ARPHRD_ETHER, make: func(n string) netlink.Link {
		return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: n}}
	}},
	{kind: "ifb", hwType: unix.ARPHRD_ETHER, make: func(n string) netlink.Link {
		return &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: n}}
	}},
	{kind: "tun", hwType: unix.ARPHRD_NONE, tuntap: "tun"},
	{kind: "tun", hwType: unix.ARPHRD_ETHER, tuntap: "tap"},
}

// TestTunnelLinksInRealNetNS creates each tunnel and virtual device in a
// namespace of the test's own, under a name no pattern excludes, brings
// it up, then down: the interface check reports nothing for any of them,
// because the kernel's link dump says what they are. A veth pair named like
// them, taken down the same way, is reported: the check does watch that
// namespace. Each link's kind and hardware type in the dump are checked
// against what the drivers set, so the fixture messages below (for kernels
// built without a driver) say what a kernel says.
func TestTunnelLinksInRealNetNS(t *testing.T) {
	ns := netnstest.New(t)
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{NetNS: "/run/netns/node"})
	check := monitortest.Stepper(t, m, "net-interfaces", clk, 30*time.Second)
	ns.Up("lo")

	var created, missing []string
	want := map[string]tunnelLink{}
	for i, tl := range tunnelLinks {
		name := "fabric" + string(rune('a'+i))
		var err error
		if tl.tuntap != "" {
			ns.Exec("ip", "tuntap", "add", "mode", tl.tuntap, "name", name)
		} else {
			err = ns.H.LinkAdd(tl.make(name))
		}
		switch {
		case errors.Is(err, unix.EOPNOTSUPP):
			// The kernel was built without the driver (and cannot load
			// it): the fixture test below judges the message it would send.
			missing = append(missing, tl.kind)
			continue
		case err != nil:
			t.Fatalf("creating %s %s: %v", tl.kind, name, err)
		}
		want[name] = tl
		created = append(created, name)
	}
	t.Logf("created in the kernel: %d links; this kernel has no driver for %v (judged from fixture messages in TestTunnelLinkMessages)", len(created), missing)
	if len(created) < 3 {
		t.Fatalf("only %v could be created: the kernel must at least have vxlan, tun and ifb", created)
	}

	links, err := linkListIn(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		tl, ok := want[l.Name]
		if !ok {
			continue
		}
		if l.Kind != tl.kind || l.HWType != hardwareTypeName(tl.hwType) {
			t.Errorf("%s: the kernel reports kind %q, link/%s; the drivers set kind %q, link/%s", l.Name, l.Kind, l.HWType, tl.kind, hardwareTypeName(tl.hwType))
		}
		delete(want, l.Name)
	}
	if len(want) > 0 {
		t.Fatalf("not in the dump: %v", want)
	}

	ns.AddVeth("fabricx", "fabricy")
	// Up: a TUN/TAP device with no program attached has no carrier, so it
	// is up but not running, which a watched link would be reported for.
	ns.Up(append(created, "fabricx", "fabricy")...)
	ns.WaitRunning("fabricx", true)
	ns.WaitRunning("fabricy", true)
	check("")
	check("")
	ns.Down(append(created, "fabricx")...)
	ns.WaitRunning("fabricy", false)
	check("")
	check("InterfaceNotRunning/fabricy,InterfaceNotUp/fabricx") // in ifindex order: veth registers the peer first
}

// linkListIn dumps the links of ns as the monitor does, from a thread in
// that namespace.
func linkListIn(t *testing.T, ns *netnstest.NS) ([]linkInfo, error) {
	t.Helper()
	var links []linkInfo
	err := netNS{path: ns.Path}.run(func() error {
		var err error
		links, err = linkList()
		return err
	})
	return links, err
}

// linkMessage is an RTM_NEWLINK payload as rtnl_fill_ifinfo lays it out:
// ifinfomsg, IFLA_IFNAME, IFLA_ADDRESS, IFLA_OPERSTATE and, for a link
// with rtnl_link_ops, IFLA_LINKINFO carrying IFLA_INFO_KIND.
func linkMessage(index int32, hwType uint16, flags uint32, name, kind string, addr net.HardwareAddr, operState uint8) []byte {
	ifi := nl.NewIfInfomsg(unix.AF_UNSPEC)
	ifi.Index, ifi.Type, ifi.Flags = index, hwType, flags
	b := ifi.Serialize()
	b = append(b, nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)).Serialize()...)
	if addr != nil {
		b = append(b, nl.NewRtAttr(unix.IFLA_ADDRESS, addr).Serialize()...)
	}
	b = append(b, nl.NewRtAttr(unix.IFLA_OPERSTATE, []byte{operState}).Serialize()...)
	if kind != "" {
		li := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
		li.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(kind))
		b = append(b, li.Serialize()...)
	}
	return b
}

// ipoibAddr is an IPoIB hardware address (20 bytes: flags and QPN, then the
// port GID), as ip link shows one: link/infiniband 00:00:10:29:fe:80:...
var ipoibAddr = net.HardwareAddr{0x00, 0x00, 0x10, 0x29, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x0c, 0x42, 0xa1, 0x03, 0x00, 0x9f, 0x3b, 0x6e}

// TestTunnelLinkMessages judges links from the messages the kernel sends
// for them, through the same decoding as the dump: IPoIB ports (which need
// InfiniBand hardware: ARPHRD_INFINIBAND from ipoib_setup_common in
// drivers/infiniband/ulp/ipoib/ipoib_main.c, kind "ipoib" from
// ipoib_netlink.c, or no kind from a driver that registers no link ops),
// and every tunnel of tunnelLinks, whether or not this kernel has its
// driver. Each goes up, then down, and raises nothing; a NIC beside them
// (no kind, Ethernet, and one with a name like theirs) going down does.
func TestTunnelLinkMessages(t *testing.T) {
	const up = unix.IFF_UP | unix.IFF_RUNNING | unix.IFF_LOWER_UP
	type msg struct {
		name, kind string
		hwType     uint16
		addr       net.HardwareAddr
	}
	msgs := []msg{
		{"lo", "", unix.ARPHRD_LOOPBACK, make(net.HardwareAddr, 6)},
		{"ens5", "", unix.ARPHRD_ETHER, net.HardwareAddr{2, 0x4c, 0x1f, 0x3a, 0x9b, 0x21}},
		{"ibp26s0", "ipoib", unix.ARPHRD_INFINIBAND, ipoibAddr},
		{"fabric0", "", unix.ARPHRD_INFINIBAND, ipoibAddr},           // no link ops, by hardware type alone
		{"fabric0.8001", "ipoib", unix.ARPHRD_INFINIBAND, ipoibAddr}, // a P_Key child
		{"ens6", "", unix.ARPHRD_ETHER, net.HardwareAddr{2, 0x4c, 0x1f, 0x3a, 0x9b, 0x22}},
	}
	for i, tl := range tunnelLinks {
		msgs = append(msgs, msg{name: "fabric" + string(rune('a'+i)), kind: tl.kind, hwType: tl.hwType})
	}
	// Each tick sets the state of every link from index 2 on (the IPoIB
	// ports, ens6 and the tunnels): up and running; up without carrier;
	// administratively down.
	type state struct {
		flags uint32
		oper  netlink.LinkOperState
	}
	ticks := []struct {
		state state
		want  string
	}{
		{state{up, netlink.OperUp}, ""},
		{state{unix.IFF_UP, netlink.OperDown}, "InterfaceNotRunning/ens6"},
		{state{0, netlink.OperDown}, "InterfaceNotUp/ens6"},
	}
	ex := defaultExclusion()
	var st ifaceState
	for n, tick := range ticks {
		var dump [][]byte
		for i, m := range msgs {
			s := state{up, netlink.OperUp}
			if i >= 2 {
				s = tick.state
			}
			if m.hwType == unix.ARPHRD_LOOPBACK {
				s.flags |= unix.IFF_LOOPBACK
			}
			dump = append(dump, linkMessage(int32(i+1), m.hwType, s.flags, m.name, m.kind, m.addr, uint8(s.oper)))
		}
		links, err := linkInfos(dump)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range links {
			m := msgs[i]
			wantKind := m.kind
			if wantKind == "" {
				wantKind = "device"
			}
			if l.Name != m.name || l.Kind != wantKind || l.HWType != hardwareTypeName(m.hwType) {
				t.Fatalf("decoded %+v from %+v", l, m)
			}
		}
		var fs []detection.Finding
		st, fs = evalInterfaces(st, netSnapshot{Links: links, DefaultRoutes: 1}, ex, ifaceThresholds{1, 1, 1}, t0)
		if got := monitortest.Reasons(fs); got != tick.want {
			t.Fatalf("tick %d: findings %q, want %q", n, got, tick.want)
		}
	}
}

func TestLinkTypeExclusion(t *testing.T) {
	ex := defaultExclusion()
	for _, l := range []linkInfo{
		{Name: "uplink", Kind: "gre", HWType: "gre"},
		{Name: "uplink", Kind: "device", HWType: "infiniband"},
		{Name: "uplink", Kind: "ipoib", HWType: "infiniband"},
		{Name: "uplink", Kind: "device", HWType: "sit"},
		{Name: "uplink", Kind: "geneve", HWType: "ether"},
		{Name: "uplink", Kind: "tun", HWType: "none"},
	} {
		if !ex.excludes(l) {
			t.Errorf("%+v should be excluded", l)
		}
	}
	for _, l := range []linkInfo{
		{Name: "uplink", Kind: "device", HWType: "ether"},
		{Name: "uplink", Kind: "bond", HWType: "ether"},
		{Name: "uplink", Kind: "bridge", HWType: "ether"},
		{Name: "uplink", Kind: "vlan", HWType: "ether"},
		{Name: "uplink", Kind: "veth", HWType: "ether"},
		{Name: "uplink", Kind: "macvlan", HWType: "ether"},
		{Name: "uplink", Kind: "device", HWType: "none"}, // a cellular modem may be an edge node's uplink
		{Name: "lo", Kind: "device", HWType: "loopback", Loopback: true},
	} {
		if ex.excludes(l) {
			t.Errorf("%+v should be watched", l)
		}
	}
	if (exclusion{types: nil}).excludes(linkInfo{Name: "gre0", Kind: "gre", HWType: "gre"}) {
		t.Error("an empty type list excludes nothing")
	}
}

func TestValidLinkType(t *testing.T) {
	for _, s := range []string{"gre", "ipoib", "ieee802.11", "ip6gre", "[823]", "ieee802.11/prism"} {
		if !ValidLinkType(s) {
			t.Errorf("%q should be valid", s)
		}
	}
	for _, s := range []string{"", "GRE", "gre0 ", "[]", "[8a]", "-gre", "gre,sit", "[823"} {
		if ValidLinkType(s) {
			t.Errorf("%q should be refused", s)
		}
	}
}
