package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catNetworking = "networking"

// Netlink is the part of netlink the networking collector reads;
// *netlink.Handle implements it (the agent's network namespace: the host's
// for a hostNetwork DaemonSet or a systemd service).
type Netlink interface {
	LinkList() ([]netlink.Link, error)
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RuleList(family int) ([]netlink.Rule, error)
	NeighList(linkIndex, family int) ([]netlink.Neigh, error)
}

func networking(e *Env) []collect.Collector {
	return append([]collect.Collector{
		{Name: "networking/netlink", Category: catNetworking, Run: e.netlinkState},
		commandCollector(e, catNetworking, "iptables", "iptables-save.txt", "iptables-save", "-c"),
		commandCollector(e, catNetworking, "ip6tables", "ip6tables-save.txt", "ip6tables-save", "-c"),
		commandCollector(e, catNetworking, "nftables", "nft-ruleset.txt", "nft", "list", "ruleset"),
		{Name: "networking/conntrack", Category: catNetworking, Run: e.conntrack},
		filesCollector(e, catNetworking, "dns", 0, "etc/resolv.conf", "run/systemd/resolve/resolv.conf", "etc/hosts", "etc/nsswitch.conf"),
		commandCollector(e, catNetworking, "sockets-summary", "ss-summary.txt", "ss", "-s"),
		commandCollector(e, catNetworking, "sockets", "ss.txt", "ss", "-tuanpi"),
		filesCollector(e, catNetworking, "counters", 0, "proc/net/dev", "proc/net/snmp", "proc/net/snmp6", "proc/net/netstat",
			"proc/net/sockstat", "proc/net/sockstat6", "proc/net/softnet_stat"),
		filesCollector(e, catNetworking, "cni", 0, "etc/cni/net.d/*"),
	}, cniCollectors(e)...)
}

func (e *Env) netlinkState(_ context.Context, out *collect.Output) error {
	if e.Netlink == nil {
		return collect.Skip("no netlink access")
	}
	links, err := e.Netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	var errs []error
	if err := out.WriteFile("links.txt", formatLinks(links, names)); err != nil {
		return err
	}
	var addrs []netlink.Addr
	for _, l := range links {
		as, err := e.Netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			errs = append(errs, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err))
			continue
		}
		addrs = append(addrs, as...)
	}
	if err := out.WriteFile("addresses.txt", formatAddrs(addrs, names)); err != nil {
		return err
	}
	// Every table, not only main: CNIs and policy routing use others.
	routes, err := e.Netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		errs = append(errs, fmt.Errorf("routes: %w", err))
	} else if err := out.WriteFile("routes.txt", formatRoutes(routes, names)); err != nil {
		return err
	}
	rules, err := e.Netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		errs = append(errs, fmt.Errorf("rules: %w", err))
	} else if err := out.WriteFile("rules.txt", formatRules(rules)); err != nil {
		return err
	}
	neighs, err := e.Netlink.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		errs = append(errs, fmt.Errorf("neighbours: %w", err))
	} else if err := out.WriteFile("neighbours.txt", formatNeighs(neighs, names)); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func formatLinks(links []netlink.Link, names map[int]string) []byte {
	rows := make([][]string, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		master := "-"
		if a.MasterIndex != 0 {
			master = nameOf(names, a.MasterIndex)
		}
		stats := "-"
		if s := a.Statistics; s != nil {
			stats = fmt.Sprintf("rx %d/%d err %d drop %d, tx %d/%d err %d drop %d", s.RxBytes, s.RxPackets, s.RxErrors, s.RxDropped,
				s.TxBytes, s.TxPackets, s.TxErrors, s.TxDropped)
		}
		mac := a.HardwareAddr.String()
		if mac == "" {
			mac = "-"
		}
		rows = append(rows, []string{strconv.Itoa(a.Index), a.Name, l.Type(), a.OperState.String(), strings.ReplaceAll(a.Flags.String(), "|", ","),
			strconv.Itoa(a.MTU), mac, master, stats})
	}
	sort.Slice(rows, func(i, j int) bool { return atoi(rows[i][0]) < atoi(rows[j][0]) })
	return table([]string{"INDEX", "NAME", "TYPE", "STATE", "FLAGS", "MTU", "MAC", "MASTER", "COUNTERS"}, rows)
}

func formatAddrs(addrs []netlink.Addr, names map[int]string) []byte {
	rows := make([][]string, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		fam := "inet"
		if a.IP.To4() == nil {
			fam = "inet6"
		}
		rows = append(rows, []string{nameOf(names, a.LinkIndex), fam, a.IPNet.String(), scopeName(a.Scope), lft(a.ValidLft), lft(a.PreferedLft)})
	}
	return table([]string{"DEV", "FAMILY", "ADDRESS", "SCOPE", "VALID", "PREFERRED"}, rows)
}

// formatRoutes writes routes like `ip route show table all`.
func formatRoutes(routes []netlink.Route, names map[int]string) []byte {
	var b bytes.Buffer
	for _, r := range routes {
		dst := "default"
		if r.Dst != nil {
			dst = r.Dst.String()
		}
		if r.Type != 0 && r.Type != 1 { // RTN_UNICAST
			dst = routeType(r.Type) + " " + dst
		}
		b.WriteString(dst)
		if r.Gw != nil {
			fmt.Fprintf(&b, " via %s", r.Gw)
		}
		if r.LinkIndex != 0 {
			fmt.Fprintf(&b, " dev %s", nameOf(names, r.LinkIndex))
		}
		for _, nh := range r.MultiPath {
			fmt.Fprintf(&b, " nexthop via %s dev %s weight %d", nh.Gw, nameOf(names, nh.LinkIndex), nh.Hops+1)
		}
		fmt.Fprintf(&b, " table %s", tableName(r.Table))
		if p := r.Protocol.String(); r.Protocol != 0 && p != "" {
			fmt.Fprintf(&b, " proto %s", p)
		}
		if r.Scope != netlink.SCOPE_UNIVERSE {
			fmt.Fprintf(&b, " scope %s", scopeName(int(r.Scope)))
		}
		if r.Src != nil {
			fmt.Fprintf(&b, " src %s", r.Src)
		}
		if r.Priority != 0 {
			fmt.Fprintf(&b, " metric %d", r.Priority)
		}
		if r.MTU != 0 {
			fmt.Fprintf(&b, " mtu %d", r.MTU)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// formatRules writes rules like `ip rule`.
func formatRules(rules []netlink.Rule) []byte {
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].Priority < rules[j].Priority })
	var b bytes.Buffer
	for _, r := range rules {
		fmt.Fprintf(&b, "%d:\t", r.Priority)
		if r.Invert {
			b.WriteString("not ")
		}
		from := "all"
		if r.Src != nil {
			from = r.Src.String()
		}
		fmt.Fprintf(&b, "from %s", from)
		if r.Dst != nil {
			fmt.Fprintf(&b, " to %s", r.Dst)
		}
		if r.Mark != 0 {
			if r.Mask != nil {
				fmt.Fprintf(&b, " fwmark %#x/%#x", r.Mark, *r.Mask)
			} else {
				fmt.Fprintf(&b, " fwmark %#x", r.Mark)
			}
		}
		if r.IifName != "" {
			fmt.Fprintf(&b, " iif %s", r.IifName)
		}
		if r.OifName != "" {
			fmt.Fprintf(&b, " oif %s", r.OifName)
		}
		fmt.Fprintf(&b, " lookup %s\n", tableName(r.Table))
	}
	return b.Bytes()
}

func formatNeighs(ns []netlink.Neigh, names map[int]string) []byte {
	rows := make([][]string, 0, len(ns))
	for _, n := range ns {
		if n.IP == nil {
			continue
		}
		mac := n.HardwareAddr.String()
		if mac == "" {
			mac = "-"
		}
		rows = append(rows, []string{n.IP.String(), nameOf(names, n.LinkIndex), mac, neighState(n.State)})
	}
	return table([]string{"ADDRESS", "DEV", "LLADDR", "STATE"}, rows)
}

func nameOf(names map[int]string, idx int) string {
	if n, ok := names[idx]; ok {
		return n
	}
	return "if" + strconv.Itoa(idx)
}

func tableName(t int) string {
	switch t {
	case 253:
		return "default"
	case 254:
		return "main"
	case 255:
		return "local"
	}
	return strconv.Itoa(t)
}

func routeType(t int) string {
	switch t {
	case 2:
		return "local"
	case 3:
		return "broadcast"
	case 4:
		return "anycast"
	case 5:
		return "multicast"
	case 6:
		return "blackhole"
	case 7:
		return "unreachable"
	case 8:
		return "prohibit"
	}
	return "type" + strconv.Itoa(t)
}

func scopeName(s int) string {
	switch s {
	case 0:
		return "global"
	case 200:
		return "site"
	case 253:
		return "link"
	case 254:
		return "host"
	case 255:
		return "nowhere"
	}
	return strconv.Itoa(s)
}

func neighState(s int) string {
	var parts []string
	for _, st := range []struct {
		bit  int
		name string
	}{{0x01, "INCOMPLETE"}, {0x02, "REACHABLE"}, {0x04, "STALE"}, {0x08, "DELAY"}, {0x10, "PROBE"}, {0x20, "FAILED"}, {0x40, "NOARP"}, {0x80, "PERMANENT"}} {
		if s&st.bit != 0 {
			parts = append(parts, st.name)
		}
	}
	if len(parts) == 0 {
		return "NONE"
	}
	return strings.Join(parts, ",")
}

func lft(sec int) string {
	if sec <= 0 || uint32(sec) == 0xffffffff {
		return "forever"
	}
	return strconv.Itoa(sec) + "s"
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// conntrack reports the table's fill level and the kernel's per-CPU
// counters (drops, insert failures).
func (e *Env) conntrack(ctx context.Context, out *collect.Output) error {
	count, err1 := e.readHost("proc/sys/net/netfilter/nf_conntrack_count")
	max, err2 := e.readHost("proc/sys/net/netfilter/nf_conntrack_max")
	if err1 != nil && err2 != nil {
		if isNotExist(err1) {
			return collect.Skip("nf_conntrack not loaded")
		}
		return err1
	}
	if err := out.WriteFile("conntrack.txt", []byte(conntrackSummary(count, max))); err != nil {
		return err
	}
	if data, err := e.readHost("proc/net/stat/nf_conntrack"); err == nil {
		if err := out.WriteFile("nf_conntrack-stat.txt", []byte(data+"\n")); err != nil {
			return err
		}
	}
	if _, err := e.Commands.LookPath("conntrack"); err == nil {
		return runTool(ctx, e, out, "conntrack-S.txt", "conntrack", "-S")
	}
	return nil
}

func conntrackSummary(count, max string) string {
	c, err1 := strconv.ParseInt(count, 10, 64)
	m, err2 := strconv.ParseInt(max, 10, 64)
	if err1 != nil || err2 != nil || m <= 0 {
		return fmt.Sprintf("count %s\nmax %s\n", count, max)
	}
	return fmt.Sprintf("count %d\nmax %d\nused %.1f%%\n", c, m, 100*float64(c)/float64(m))
}

// NewNetlink returns a Netlink on the agent's network namespace.
func NewNetlink() (Netlink, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	return h, nil
}
