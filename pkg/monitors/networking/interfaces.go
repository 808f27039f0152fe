package networking

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// linkInfo is what the interface checks need of one link.
type linkInfo struct {
	Name  string
	Index int
	// Kind is the kernel's IFLA_INFO_KIND, as ip -d link prints it: "veth",
	// "bridge", "vxlan", "gre", "ipoib", ...; "device" for a link without
	// one (a NIC its driver registered).
	Kind string
	// HWType is the device's hardware type (ARPHRD), named as ip link
	// prints it after "link/": "ether", "infiniband", "sit", "gre", ...
	HWType string
	MAC    string
	// Loopback is IFF_LOOPBACK, AdminUp IFF_UP, Running IFF_RUNNING (the
	// kernel sets it when the operational state is up: carrier present,
	// lower layers up, not dormant).
	Loopback, AdminUp, Running bool
	OperState                  string
	// Ports counts the links enslaved to this one (a bridge's or bond's
	// ports): without any, a bridge or bond has no carrier by design.
	Ports int
	// Addresses are the link's global unicast addresses: someone configured
	// the link, so it is meant to be up.
	Addresses []string
}

// netSnapshot is what the interface check gathers in one netlink round.
type netSnapshot struct {
	Links []linkInfo
	// DefaultRoutes counts the default routes (0.0.0.0/0, ::/0) of the main
	// routing table, both families.
	DefaultRoutes int
}

func (m *Monitor) runInterfaces(ctx context.Context) ([]detection.Finding, error) {
	if m.excludeErr != nil {
		return nil, m.excludeErr
	}
	snap, err := gather(ctx, m, &m.ifaceGuard, "netlink link, address and route dump", readNetSnapshot)
	if err != nil {
		return nil, err
	}
	thr := ifaceThresholds{
		NotUp:      m.countThreshold(health.ReasonInterfaceNotUp),
		NotRunning: m.countThreshold(health.ReasonInterfaceNotRunning),
		Loopback:   m.countThreshold(health.ReasonMissingLoopbackInterface),
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	var fs []detection.Finding
	m.ifaces, fs = evalInterfaces(m.ifaces, snap, m.exclude, thr, now)
	m.mu.Unlock()
	return append(fs, evalDefaultRoute(snap, m.exclude, now)...), nil
}

// readNetSnapshot dumps links, addresses and the main routing table with a
// netlink handle opened in the current thread's network namespace.
func readNetSnapshot() (netSnapshot, error) {
	links, err := linkList()
	if err != nil {
		return netSnapshot{}, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return netSnapshot{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return netSnapshot{}, fmt.Errorf("netlink address dump: %w", err)
	}
	byIndex := map[int]*linkInfo{}
	for i := range links {
		byIndex[links[i].Index] = &links[i]
	}
	for _, a := range addrs {
		if l := byIndex[a.LinkIndex]; l != nil && a.IPNet != nil && a.Scope == unix.RT_SCOPE_UNIVERSE && a.IP.IsGlobalUnicast() {
			l.Addresses = append(l.Addresses, a.IPNet.String())
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return netSnapshot{}, fmt.Errorf("netlink route dump: %w", err)
	}
	snap := netSnapshot{Links: links}
	for _, r := range routes {
		if isDefault(r.Dst) {
			snap.DefaultRoutes++
		}
	}
	return snap, nil
}

// linkList dumps the links of the current thread's namespace. It reads the
// RTM_NEWLINK messages itself rather than through Handle.LinkList: the
// link's hardware type (ifinfomsg.ifi_type) and the kernel's own kind name
// are in the message, and the typed links netlink builds keep neither
// exactly (tun reads back as "tuntap", ARPHRD_IP6GRE as "unknown823").
func linkList() ([]linkInfo, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF)))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		// A dump interrupted by a concurrent change is retried next period
		// rather than judged on a partial list.
		return nil, fmt.Errorf("netlink link dump: %w", err)
	}
	return linkInfos(msgs)
}

// linkInfos decodes RTM_NEWLINK messages (without their netlink header).
func linkInfos(msgs [][]byte) ([]linkInfo, error) {
	out := make([]linkInfo, 0, len(msgs))
	ports := map[int]int{}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg {
			return nil, fmt.Errorf("netlink link dump: a message of %d bytes", len(m))
		}
		ifi := nl.DeserializeIfInfomsg(m)
		l, err := netlink.LinkDeserialize(nil, m)
		if err != nil {
			return nil, fmt.Errorf("netlink link dump: %w", err)
		}
		kind, err := linkKind(m[unix.SizeofIfInfomsg:])
		if err != nil {
			return nil, fmt.Errorf("netlink link dump: %s: %w", l.Attrs().Name, err)
		}
		a := l.Attrs()
		if a.MasterIndex > 0 {
			ports[a.MasterIndex]++
		}
		out = append(out, linkInfo{
			Name:      a.Name,
			Index:     a.Index,
			Kind:      kind,
			HWType:    hardwareTypeName(ifi.Type),
			MAC:       a.HardwareAddr.String(),
			Loopback:  a.RawFlags&unix.IFF_LOOPBACK != 0,
			AdminUp:   a.RawFlags&unix.IFF_UP != 0,
			Running:   a.RawFlags&unix.IFF_RUNNING != 0,
			OperState: a.OperState.String(),
		})
	}
	for i := range out {
		out[i].Ports = ports[out[i].Index]
	}
	return out, nil
}

// linkKind is IFLA_LINKINFO's IFLA_INFO_KIND in a link's attributes,
// "device" when there is none.
func linkKind(attrs []byte) (string, error) {
	as, err := nl.ParseRouteAttr(attrs)
	if err != nil {
		return "", err
	}
	for _, a := range as {
		if a.Attr.Type&^unix.NLA_F_NESTED != unix.IFLA_LINKINFO {
			continue
		}
		info, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return "", err
		}
		for _, i := range info {
			if i.Attr.Type == unix.IFLA_INFO_KIND {
				return strings.TrimRight(string(i.Value), "\x00"), nil
			}
		}
	}
	return "device", nil
}

// isDefault reports whether dst is a default route's destination. netlink
// reports 0.0.0.0/0 (or ::/0) since v1.2, nil before.
func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && dst.IP.IsUnspecified()
}

// --- pure evaluation ---------------------------------------------------------

// ifaceState is what the interface check carries between runs.
type ifaceState struct {
	// seenUp are the links this agent has seen administratively up: if one
	// goes down it was meant to be up.
	seenUp map[string]bool
	// strikes counts consecutive failing checks per reason and link.
	strikes strikeMap
}

type ifaceThresholds struct{ NotUp, NotRunning, Loopback int }

// loopbackSubject is the subject of MissingLoopbackInterface.
const loopbackSubject = "lo"

// evalInterfaces reports, each after its threshold of consecutive checks
// (messages stay the same while a fault lasts, so the condition is not
// rewritten on every check):
//   - MissingLoopbackInterface when no link is a loopback;
//   - InterfaceNotUp for a loopback that is down, and for a watched link that
//     is down while it was seen up before or still carries a global address
//     (a NIC nobody configured, like an unused second ENI, is not expected);
//   - InterfaceNotRunning for a watched link that is up without IFF_RUNNING
//     (a bridge or bond without ports has no carrier by design: not a fault).
//
// Links exclude names or types are not watched; loopbacks always are. A
// link that disappears is forgotten: CNIs delete interfaces as a matter of
// course.
func evalInterfaces(prev ifaceState, snap netSnapshot, exclude exclusion, thr ifaceThresholds, now time.Time) (ifaceState, []detection.Finding) {
	next := ifaceState{seenUp: map[string]bool{}, strikes: strikeMap{}}
	var fs []detection.Finding
	hasLoopback := false
	for _, l := range snap.Links {
		if l.Loopback {
			hasLoopback = true
		}
		if exclude.excludes(l) {
			continue
		}
		if l.AdminUp || prev.seenUp[l.Name] {
			next.seenUp[l.Name] = true
		}
		switch {
		case !l.AdminUp && (l.Loopback || prev.seenUp[l.Name] || len(l.Addresses) > 0):
			n := next.strikes.hit(prev.strikes, health.ReasonInterfaceNotUp, l.Name)
			if n >= thr.NotUp {
				fs = append(fs, detection.Finding{
					Reason:   health.ReasonInterfaceNotUp,
					Message:  fmt.Sprintf("interface %s is administratively down (%s) for at least %d consecutive checks", l.Name, describeLink(l, prev.seenUp[l.Name]), thr.NotUp),
					Observed: now,
					Subject:  l.Name,
				})
			}
		case l.AdminUp && !l.Running && !portless(l):
			n := next.strikes.hit(prev.strikes, health.ReasonInterfaceNotRunning, l.Name)
			if n >= thr.NotRunning {
				fs = append(fs, detection.Finding{
					Reason: health.ReasonInterfaceNotRunning,
					Message: fmt.Sprintf("interface %s is up but not running: operational state %s, no carrier or lower layer down (%s) for at least %d consecutive checks",
						l.Name, l.OperState, describeLink(l, false), thr.NotRunning),
					Observed: now,
					Subject:  l.Name,
				})
			}
		}
	}
	if !hasLoopback {
		n := next.strikes.hit(prev.strikes, health.ReasonMissingLoopbackInterface, loopbackSubject)
		if n >= thr.Loopback {
			fs = append(fs, detection.Finding{
				Reason:   health.ReasonMissingLoopbackInterface,
				Message:  fmt.Sprintf("the network namespace has no loopback interface (at least %d consecutive checks): everything that connects to localhost fails", thr.Loopback),
				Observed: now,
				Subject:  loopbackSubject,
			})
		}
	}
	return next, fs
}

// portless reports a bridge or bond without ports: the kernel keeps its
// carrier off until one joins (a CNI or docker bridge on a node with no
// pods yet, or after the last left), which is no fault.
func portless(l linkInfo) bool {
	return (l.Kind == "bridge" || l.Kind == "bond") && l.Ports == 0
}

// describeLink is the identifying detail of a link in messages.
func describeLink(l linkInfo, seenUp bool) string {
	parts := []string{"kind " + l.Kind}
	if l.HWType != "" && l.HWType != "ether" && l.HWType != "loopback" {
		parts = append(parts, "link/"+l.HWType)
	}
	if l.MAC != "" {
		parts = append(parts, "MAC "+l.MAC)
	}
	switch {
	case l.Loopback:
		parts = append(parts, "the loopback interface")
	case len(l.Addresses) > 0:
		parts = append(parts, "addresses "+strings.Join(l.Addresses, ", "))
	case seenUp:
		parts = append(parts, "it was up before")
	}
	return strings.Join(parts, ", ")
}

// evalDefaultRoute reports MissingDefaultRoutes when a watched, running link
// has a global address but the main table has no default route in either
// family: the node cannot reach anything off its subnets. A namespace with
// nothing but loopback is not expected to route anywhere.
func evalDefaultRoute(snap netSnapshot, exclude exclusion, now time.Time) []detection.Finding {
	if snap.DefaultRoutes > 0 {
		return nil
	}
	var addressed []string
	for _, l := range snap.Links {
		if l.Loopback || !l.AdminUp || !l.Running || len(l.Addresses) == 0 || exclude.excludes(l) {
			continue
		}
		addressed = append(addressed, l.Name+" "+strings.Join(l.Addresses, ","))
	}
	if len(addressed) == 0 {
		return nil
	}
	slices.Sort(addressed)
	return []detection.Finding{{
		Reason: health.ReasonMissingDefaultRoutes,
		Message: fmt.Sprintf("no default route in the main routing table (IPv4 or IPv6) although %s: traffic off the local subnets has nowhere to go",
			strings.Join(addressed, "; ")),
		Observed: now,
	}}
}

// strikeKey identifies a consecutive-failure counter.
type strikeKey struct{ reason, subject string }

// strikeMap counts consecutive failing checks. A check builds a fresh map
// each run from the previous one, so a subject that passes (or vanishes) is
// reset without bookkeeping.
type strikeMap map[strikeKey]int

// hit records a failure of (reason, subject) in m, continuing the count of
// prev, and returns the count.
func (m strikeMap) hit(prev strikeMap, reason, subject string) int {
	k := strikeKey{reason, subject}
	n := prev[k] + 1
	m[k] = n
	return n
}

// strikes is a single consecutive-failure counter.
type strikes struct {
	n     int
	since time.Time
}

// fail records a failure at now and returns the count.
func (s *strikes) fail(now time.Time) int {
	if s.n == 0 {
		s.since = now
	}
	s.n++
	return s.n
}

func (s *strikes) reset() { *s = strikes{} }
