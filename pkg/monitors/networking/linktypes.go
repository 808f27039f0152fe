package networking

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultExcludeLinkTypes are the link types InterfaceNotUp and
// InterfaceNotRunning do not watch, whatever the link's name: links that
// carry no node traffic, or whose carrier says nothing about the node.
// Each entry is matched against a link's kind (IFLA_INFO_KIND, the word
// after the flags in `ip -d link`, e.g. "gre", "ipoib") and against its
// hardware type (the ARPHRD type of the device, the word after "link/" in
// `ip link`, e.g. "infiniband", "sit"), so a tunnel or IPoIB port is
// recognised by what the kernel says it is, not by a naming convention.
//
//   - InfiniBand (IPoIB) ports: the RDMA fabric of an accelerator node. A
//     port losing its carrier (a cable, a switch, no subnet manager yet) is
//     a fabric fault the RDMA counters report (EFAErrorMetric), not a node
//     that must be replaced. Hardware type infiniband covers every IPoIB
//     driver, kind ipoib the child (P_Key) interfaces.
//   - IP tunnels: GRE and GRETAP, ERSPAN, SIT, IPIP, ip6tnl, VTI, over IPv4
//     and IPv6. Loading a tunnel module creates its fallback device (gre0,
//     gretap0, erspan0, sit0, tunl0, ip6tnl0, ip6gre0, ip_vti0) in every
//     namespace; the tunnels a VPN or a CNI adds come and go with them.
//   - Overlays and virtual devices that CNIs, kube-proxy and service meshes
//     create and delete as they please: VXLAN, Geneve, bare UDP, GTP,
//     WireGuard, XFRM, TUN/TAP, dummy, IFB, nlmon.
//
// A NIC (no kind, an Ethernet hardware type), a bond, a bridge, a VLAN, a
// veth or a macvlan may all carry the node's own traffic (on a kind node the
// node's eth0 is a veth), so none is excluded by type.
var DefaultExcludeLinkTypes = []string{
	// InfiniBand
	"infiniband", "ipoib",
	// IP tunnels: kinds, then the hardware types the kernel gives them
	// (ARPHRD_IPGRE, ARPHRD_IP6GRE, ARPHRD_SIT, ARPHRD_TUNNEL, ARPHRD_TUNNEL6).
	"gre", "gretap", "ip6gre", "ip6gretap", "erspan", "ip6erspan", "sit", "ipip", "ip6tnl", "vti", "vti6",
	"gre6", "tunnel6",
	// overlays and virtual devices
	"vxlan", "geneve", "bareudp", "gtp", "wireguard", "xfrm", "tun", "dummy", "ifb", "nlmon",
}

// hardwareTypes names ARPHRD types as iproute2 does (lib/ll_types.c), for
// the types a node may have; others print as [N], as ip link prints them.
var hardwareTypes = map[uint16]string{
	unix.ARPHRD_ETHER:      "ether",
	unix.ARPHRD_LOOPBACK:   "loopback",
	unix.ARPHRD_INFINIBAND: "infiniband",
	unix.ARPHRD_TUNNEL:     "ipip",
	unix.ARPHRD_TUNNEL6:    "tunnel6",
	unix.ARPHRD_SIT:        "sit",
	unix.ARPHRD_IPGRE:      "gre",
	unix.ARPHRD_IP6GRE:     "gre6",
	unix.ARPHRD_PPP:        "ppp",
	unix.ARPHRD_NETLINK:    "netlink",
	unix.ARPHRD_CAN:        "can",
	unix.ARPHRD_IEEE80211:  "ieee802.11",
	unix.ARPHRD_NONE:       "none",
	unix.ARPHRD_VOID:       "void",
}

// hardwareTypeName is the name of an ARPHRD type.
func hardwareTypeName(t uint16) string {
	if n, ok := hardwareTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("[%d]", t)
}

// ValidLinkType reports whether s may name a link type: a kind or a
// hardware type name as ip prints them ("gre", "ieee802.11"), or an
// unnamed hardware type as "[N]".
func ValidLinkType(s string) bool {
	if n, ok := strings.CutPrefix(s, "["); ok {
		n, ok = strings.CutSuffix(n, "]")
		return ok && n != "" && strings.Trim(n, "0123456789") == ""
	}
	return s != "" && strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789", rune(s[0])) &&
		strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789._/-") == ""
}

// exclusion decides which links the interface checks leave alone: by name
// (an RE2 pattern) or by type (kind or hardware type). Loopbacks are always
// watched.
type exclusion struct {
	names *regexp.Regexp
	types []string
}

// excludes reports whether l is not watched.
func (e exclusion) excludes(l linkInfo) bool {
	if l.Loopback {
		return false
	}
	if e.names != nil && e.names.MatchString(l.Name) {
		return true
	}
	return slices.Contains(e.types, l.Kind) || slices.Contains(e.types, l.HWType)
}

// normalizeLinkTypes lower-cases and de-duplicates types.
func normalizeLinkTypes(types []string) []string {
	out := make([]string, 0, len(types))
	for _, t := range types {
		t = strings.ToLower(strings.TrimSpace(t))
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
