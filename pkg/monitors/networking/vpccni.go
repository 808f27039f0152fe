package networking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// The Amazon VPC CNI's IPAM daemon keeps its allocations in a checkpoint
// file (pkg/ipamd/datastore, since v1.12; /var/run is /run on most
// distributions, but not under every host root).
var ipamCheckpointPaths = []string{"var/run/aws-node/ipam.json", "run/aws-node/ipam.json"}

// ipamCheckpointVersion is the only format the checkpoint has had
// (datastore.CheckpointFormatVersion).
const ipamCheckpointVersion = "vpc-cni-ipam/1"

// vpcCNIConfig is the file the VPC CNI writes into /etc/cni/net.d.
const vpcCNIConfig = "10-aws.conflist"

// maxCheckpointSize bounds the read: an allocation is ~300 bytes and a
// node has at most a few hundred.
const maxCheckpointSize = 16 << 20

// toContainerRulePriority is the priority of the VPC CNI's "to POD-IP
// lookup main" rule (pkg/networkutils ToContainerRulePriority), added for
// every pod IP by cmd/routed-eni-cni-plugin/driver setupIPBasedContainerRouteRules.
const toContainerRulePriority = 512

// PodLister returns the pods bound to this node from the API server's
// cache. It must not block on the network.
type PodLister func() ([]*corev1.Pod, error)

// ipamAllocation is one row of the checkpoint (datastore.CheckpointEntry).
type ipamAllocation struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	IPv4        string `json:"ipv4,omitempty"`
	IPv6        string `json:"ipv6,omitempty"`
	Metadata    struct {
		Namespace string `json:"k8sPodNamespace,omitempty"`
		Name      string `json:"k8sPodName,omitempty"`
	} `json:"metadata"`
}

type ipamCheckpoint struct {
	Version     string           `json:"version"`
	Allocations []ipamAllocation `json:"allocations"`
}

// parseCheckpoint decodes the checkpoint; an unknown version is an error
// rather than a guess at a format we do not know.
func parseCheckpoint(data []byte) (ipamCheckpoint, error) {
	var c ipamCheckpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("IPAM checkpoint: %w", err)
	}
	if c.Version != ipamCheckpointVersion {
		return c, fmt.Errorf("IPAM checkpoint version %q is not %q", c.Version, ipamCheckpointVersion)
	}
	return c, nil
}

// vpcCNIState is what the VPC CNI check gathers: the checkpoint's pod
// addresses, the host routes and "to" rules of the inspected namespace, and
// this node's pods.
type vpcCNIState struct {
	// Installed is false when the VPC CNI is not on this node (its CNI
	// configuration or its checkpoint is missing): nothing to check.
	Installed   bool
	Allocations []ipamAllocation
	// Routes are the destinations of the main table's link-scope host
	// routes (/32, /128); Rules the destinations of priority-512 rules
	// looking up main.
	Routes, Rules map[netip.Addr]bool
	Pods          []*corev1.Pod
	// PodsErr is why the pods are unknown (cache not synced); the
	// consistency verdict is then skipped, the routes still checked.
	PodsErr error
}

func (m *Monitor) runVPCCNI(ctx context.Context) ([]detection.Finding, error) {
	st, err := gather(ctx, m, &m.vpcGuard, "IPAM checkpoint and netlink route and rule dump", m.readVPCCNI)
	if err != nil {
		return nil, err
	}
	if st.Installed && m.opts.Pods != nil {
		st.Pods, st.PodsErr = m.opts.Pods()
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.vpc, fs = evalVPCCNI(m.vpc, st, now)
	return fs, nil
}

// readVPCCNI gathers the check's input; it runs in the inspected namespace.
func (m *Monitor) readVPCCNI() (vpcCNIState, error) {
	confs, err := cniConfigs(m.hostPath(cniConfDir))
	if err != nil || !slices.Contains(confs, vpcCNIConfig) {
		return vpcCNIState{}, err
	}
	data, err := m.readCheckpoint()
	if errors.Is(err, os.ErrNotExist) {
		return vpcCNIState{}, nil // before v1.12, or IPAMD not started yet
	}
	if err != nil {
		return vpcCNIState{}, err
	}
	cp, err := parseCheckpoint(data)
	if err != nil {
		return vpcCNIState{}, err
	}
	st := vpcCNIState{Installed: true, Allocations: cp.Allocations, Routes: map[netip.Addr]bool{}, Rules: map[netip.Addr]bool{}}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return vpcCNIState{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return vpcCNIState{}, fmt.Errorf("netlink route dump: %w", err)
	}
	// Any host route to the address counts (the plugin adds it with link
	// scope; IPv6 routes are dumped with universe scope whatever was set).
	for _, r := range routes {
		if a, ok := hostAddr(r.Dst); ok {
			st.Routes[a] = true
		}
	}
	rules, err := h.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return vpcCNIState{}, fmt.Errorf("netlink rule dump: %w", err)
	}
	for _, r := range rules {
		if a, ok := hostAddr(r.Dst); ok && r.Priority == toContainerRulePriority && r.Table == unix.RT_TABLE_MAIN {
			st.Rules[a] = true
		}
	}
	return st, nil
}

func (m *Monitor) readCheckpoint() ([]byte, error) {
	var firstErr error
	for _, p := range ipamCheckpointPaths {
		data, err := readBounded(m.hostPath(p), maxCheckpointSize)
		if err == nil {
			return data, nil
		}
		if firstErr == nil || !errors.Is(err, os.ErrNotExist) {
			firstErr = err
		}
	}
	return nil, firstErr
}

// hostAddr returns the address of a /32 or /128 prefix.
func hostAddr(n *net.IPNet) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	ones, bits := n.Mask.Size()
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok || bits == 0 || ones != bits {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// readBounded reads a file of at most limit bytes; a larger one is an
// error, not a truncated read that would parse as something else.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// vpcEval remembers, per pod address, how many consecutive checks found it
// without its route, rule or consistent pod: the CNI plugin sets up routes
// and rules after IPAMD allocates the address, and removes them before
// IPAMD releases it, so one sighting may be a pod starting or stopping.
type vpcEval struct {
	noRoute, noRule, mismatch map[string]int
}

// vpcStrikes is how many consecutive checks a fault must be seen in.
const vpcStrikes = 2

// evalVPCCNI reports MissingIPRoutes and MissingIPRules for allocated pod
// addresses without their host route or "to" rule, and
// IPAMDInconsistentState for a running pod whose addresses are not the one
// the checkpoint allocated to it; each after vpcStrikes consecutive checks.
func evalVPCCNI(prev vpcEval, st vpcCNIState, now time.Time) (vpcEval, []detection.Finding) {
	next := vpcEval{noRoute: map[string]int{}, noRule: map[string]int{}, mismatch: map[string]int{}}
	if !st.Installed {
		return next, nil
	}
	var fs []detection.Finding
	for _, a := range st.Allocations {
		for _, s := range []string{a.IPv4, a.IPv6} {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			addr = addr.Unmap()
			key := addr.String()
			pod := podName(a)
			if !st.Routes[addr] {
				if next.noRoute[key] = prev.noRoute[key] + 1; next.noRoute[key] >= vpcStrikes {
					fs = append(fs, detection.Finding{
						Reason: health.ReasonMissingIPRoutes,
						Message: fmt.Sprintf("pod address %s (%s) has no host route in the main table (expected %q): traffic to the pod is not delivered",
							key, pod, key+" dev <pod veth> scope link"),
						Observed: now, Subject: key,
					})
				}
			}
			if !st.Rules[addr] {
				if next.noRule[key] = prev.noRule[key] + 1; next.noRule[key] >= vpcStrikes {
					fs = append(fs, detection.Finding{
						Reason: health.ReasonMissingIPRules,
						Message: fmt.Sprintf("pod address %s (%s) has no policy routing rule %q: replies to the pod may take another ENI's table",
							key, pod, fmt.Sprintf("%d: from all to %s lookup main", toContainerRulePriority, key)),
						Observed: now, Subject: key,
					})
				}
			}
		}
	}
	if st.PodsErr == nil {
		for key, f := range inconsistent(st.Allocations, st.Pods) {
			if next.mismatch[key] = prev.mismatch[key] + 1; next.mismatch[key] >= vpcStrikes {
				f.Observed = now
				fs = append(fs, f)
			}
		}
	}
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Reason != fs[j].Reason {
			return fs[i].Reason < fs[j].Reason
		}
		return fs[i].Subject < fs[j].Subject
	})
	return next, fs
}

// inconsistent returns, keyed by pod, IPAMDInconsistentState findings for
// the running pods of pod network whose addresses include none of the ones
// the checkpoint allocated to them (the allocations carry the pod's name
// since VPC CNI v1.12). Pods not yet running, host-network pods and pods
// the checkpoint does not know are left alone: the first two have no
// allocation to compare, the last are SGP branch ENI pods or pods of
// another network.
func inconsistent(allocs []ipamAllocation, pods []*corev1.Pod) map[string]detection.Finding {
	byPod := map[string][]string{}
	for _, a := range allocs {
		if a.Metadata.Name == "" || a.IfName != "" && a.IfName != "eth0" {
			continue // only the pod's primary interface is in its status
		}
		k := a.Metadata.Namespace + "/" + a.Metadata.Name
		for _, s := range []string{a.IPv4, a.IPv6} {
			if addr, err := netip.ParseAddr(s); err == nil {
				byPod[k] = append(byPod[k], addr.Unmap().String())
			}
		}
	}
	out := map[string]detection.Finding{}
	for _, p := range pods {
		k := p.Namespace + "/" + p.Name
		allocated, ok := byPod[k]
		if !ok || p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		var have []string
		for _, ip := range p.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil {
				have = append(have, addr.Unmap().String())
			}
		}
		if len(have) == 0 || slices.ContainsFunc(have, func(a string) bool { return slices.Contains(allocated, a) }) {
			continue
		}
		out[k] = detection.Finding{
			Reason: health.ReasonIPAMDInconsistentState,
			Message: fmt.Sprintf("pod %s has address %s, but the IPAM checkpoint allocated %s to it: IPAMD may give the pod's address to another pod",
				k, strings.Join(have, ", "), strings.Join(allocated, ", ")),
			Subject: k,
		}
	}
	return out
}

func podName(a ipamAllocation) string {
	if a.Metadata.Name != "" {
		return "pod " + a.Metadata.Namespace + "/" + a.Metadata.Name
	}
	id := a.ContainerID
	if len(id) > 12 {
		id = id[:12]
	}
	return "sandbox " + id
}
