package networking

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
)

// allocation is a checkpoint row as IPAMD writes it (datastore.CheckpointEntry).
func allocation(sandbox, ip, ns, pod string) ipamAllocation {
	a := ipamAllocation{NetworkName: "aws-cni", ContainerID: sandbox, IfName: "eth0"}
	if strings.Contains(ip, ":") {
		a.IPv6 = ip
	} else {
		a.IPv4 = ip
	}
	a.Metadata.Namespace, a.Metadata.Name = ns, pod
	return a
}

// writeCheckpoint writes /var/run/aws-node/ipam.json under root.
func writeCheckpoint(t *testing.T, root *hostroot.Root, as ...ipamAllocation) {
	t.Helper()
	type entry struct {
		ipamAllocation
		AllocationTimestamp int64 `json:"allocationTimestamp"`
	}
	var es []entry
	for _, a := range as {
		es = append(es, entry{a, 1773480413123456789})
	}
	b, err := json.Marshal(map[string]any{"version": "vpc-cni-ipam/1", "allocations": es})
	if err != nil {
		t.Fatal(err)
	}
	root.WriteFile("var/run/aws-node/ipam.json", string(b))
}

func runningPod(ns, name string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// podNetwork sets up what the VPC CNI plugin does for one pod address: a
// host route to it on the pod's veth, and the "to" rule (priority 512).
func podNetwork(t *testing.T, ns *netnstest.NS, veth, ip string, route, rule bool) {
	t.Helper()
	bits := 32
	if strings.Contains(ip, ":") {
		bits = 128
	}
	dst := &net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(bits, bits)}
	if route {
		if err := ns.H.RouteAdd(&netlink.Route{LinkIndex: ns.Link(veth).Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN}); err != nil {
			t.Fatalf("route to %s: %v", ip, err)
		}
	}
	if rule {
		r := netlink.NewRule()
		r.Dst, r.Priority, r.Table = dst, toContainerRulePriority, unix.RT_TABLE_MAIN
		if bits == 128 {
			r.Family = unix.AF_INET6
		}
		if err := ns.H.RuleAdd(r); err != nil {
			t.Fatalf("rule to %s: %v", ip, err)
		}
	}
}

// TestVPCCNIStateInRealNetNS: the checkpoint of a fake host root against the
// routes and rules of a real namespace, changed with netlink as the CNI
// plugin changes them.
func TestVPCCNIStateInRealNetNS(t *testing.T) {
	ns := netnstest.New(t)
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	clk := clocktesting.NewFakePassiveClock(t0)
	pods := []*corev1.Pod{runningPod("default", "web-0", "10.0.1.23"), runningPod("default", "web-1", "10.0.1.24")}
	m := New(testEnv(root, clk, nil), Options{NetNS: "/run/netns/node", Pods: func() ([]*corev1.Pod, error) { return pods, nil }})
	check := monitortest.Stepper(t, m, "net-vpc-cni-state", clk, 30*time.Second)

	// No VPC CNI: nothing is read or reported, even with a stale checkpoint.
	writeCheckpoint(t, root, allocation("5f3a", "10.0.1.23", "default", "web-0"))
	check("")
	check("")

	root.AddCNIConfig("10-aws.conflist")
	ns.Up("lo")
	ns.AddVeth("eni1a2b3c4d5e6", "eni1a2b3c4d5e7")
	ns.Up("eni1a2b3c4d5e6", "eni1a2b3c4d5e7")
	podNetwork(t, ns, "eni1a2b3c4d5e6", "10.0.1.23", true, true)
	check("")
	check("")

	// A second pod: its address is allocated, the plugin has not set up
	// its network yet. One sighting is a pod starting; two are a fault.
	writeCheckpoint(t, root, allocation("5f3a", "10.0.1.23", "default", "web-0"), allocation("6e4b", "10.0.1.24", "default", "web-1"))
	check("")
	check("MissingIPRoutes/10.0.1.24,MissingIPRules/10.0.1.24")
	podNetwork(t, ns, "eni1a2b3c4d5e6", "10.0.1.24", true, false)
	check("MissingIPRules/10.0.1.24")
	podNetwork(t, ns, "eni1a2b3c4d5e6", "10.0.1.24", false, true)
	check("")

	// IPv6 pods: a /128 route and a v6 rule.
	ns.AddAddr("eni1a2b3c4d5e6", "2600:1f14:abcd::1/64")
	writeCheckpoint(t, root, allocation("5f3a", "10.0.1.23", "default", "web-0"), allocation("7a5c", "2600:1f14:abcd::23", "default", "web-2"))
	check("")
	check("MissingIPRoutes/2600:1f14:abcd::23,MissingIPRules/2600:1f14:abcd::23")
	podNetwork(t, ns, "eni1a2b3c4d5e6", "2600:1f14:abcd::23", true, true)
	check("")

	// The checkpoint gives web-0 another address than the pod has.
	pods[0] = runningPod("default", "web-0", "10.0.1.99")
	check("")
	check("IPAMDInconsistentState/default/web-0")
	pods[0] = runningPod("default", "web-0", "10.0.1.23")
	check("")
}

func TestVPCCNIStateInputs(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	for _, tc := range []struct {
		name    string
		setup   func(*hostroot.Root)
		wantErr string
	}{
		{name: "CNI configuration but no checkpoint yet (IPAMD starting, or before v1.12)", setup: func(r *hostroot.Root) { r.AddCNIConfig("10-aws.conflist") }},
		{name: "another CNI", setup: func(r *hostroot.Root) {
			r.AddCNIConfig("05-cilium.conflist")
			writeCheckpoint(t, r, allocation("5f3a", "10.0.1.23", "default", "web-0"))
		}},
		{name: "unknown checkpoint version", setup: func(r *hostroot.Root) {
			r.AddCNIConfig("10-aws.conflist")
			r.WriteFile("run/aws-node/ipam.json", `{"version":"vpc-cni-ipam/2","allocations":[]}`)
		}, wantErr: `version "vpc-cni-ipam/2"`},
		{name: "corrupt checkpoint", setup: func(r *hostroot.Root) {
			r.AddCNIConfig("10-aws.conflist")
			r.WriteFile("var/run/aws-node/ipam.json", `{"version":"vpc-cni-ipam/1","allocations":[{`)
		}, wantErr: "IPAM checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t)
			tc.setup(root)
			m := New(testEnv(root, clk, nil), Options{})
			for range 3 {
				fs, err := runCheck(t, m, "net-vpc-cni-state")
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("error %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil || len(fs) != 0 {
					t.Fatalf("%v, %v", fs, err)
				}
			}
		})
	}
}

func TestEvalVPCCNIConsistency(t *testing.T) {
	a := []ipamAllocation{
		allocation("1", "10.0.1.23", "default", "web-0"),
		allocation("2", "10.0.1.24", "default", "web-1"),
		allocation("3", "2600:1f14::24", "default", "web-1"),
		allocation("4", "10.0.1.25", "", ""), // pre-1.12 rows carry no pod name
	}
	pending := runningPod("default", "web-0", "10.0.9.9")
	pending.Status.Phase = corev1.PodPending
	deleting := runningPod("default", "web-0", "10.0.9.9")
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	hostNet := runningPod("default", "web-0", "10.0.0.5")
	hostNet.Spec.HostNetwork = true
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want string
	}{
		{"matching", []*corev1.Pod{runningPod("default", "web-0", "10.0.1.23"), runningPod("default", "web-1", "10.0.1.24")}, ""},
		{"dual stack, one family matches", []*corev1.Pod{runningPod("default", "web-1", "2600:1f14::24", "10.0.7.7")}, ""},
		{"mismatch", []*corev1.Pod{runningPod("default", "web-0", "10.0.1.77")}, "IPAMDInconsistentState/default/web-0"},
		{"a pod not running yet, being deleted, or on the host network", []*corev1.Pod{pending, deleting, hostNet}, ""},
		{"a pod the checkpoint does not name (branch ENI)", []*corev1.Pod{runningPod("default", "sgp-0", "10.0.5.5")}, ""},
		{"a running pod without addresses yet", []*corev1.Pod{runningPod("default", "web-0")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for k, f := range inconsistent(a, tc.pods) {
				got = append(got, f.Reason+"/"+k)
				if !strings.Contains(f.Message, "allocated") {
					t.Errorf("message %q", f.Message)
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("got %v, want %q", got, tc.want)
			}
		})
	}
	// The pods' cache not synced: the routes are still checked, the
	// consistency is not.
	st := vpcCNIState{Installed: true, Allocations: a[:1], Routes: nil, Rules: nil, Pods: nil, PodsErr: fmt.Errorf("pod cache not synced yet")}
	ev, _ := evalVPCCNI(vpcEval{}, st, t0)
	_, fs := evalVPCCNI(ev, st, t0)
	if got := monitortest.Reasons(fs); got != "MissingIPRoutes/10.0.1.23,MissingIPRules/10.0.1.23" {
		t.Fatalf("got %q", got)
	}
}
