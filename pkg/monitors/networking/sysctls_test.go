package networking

import (
	"strings"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

func TestSysctlCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*hostroot.Root)
		thr     float64
		want    string // "Reason,..." of the findings
		msg     string // substring of the first message
		wantErr bool
	}{
		{name: "healthy node"},
		{name: "healthy node with a CNI", setup: func(r *hostroot.Root) { r.AddCNIConfig("10-aws.conflist") }},
		{
			name:  "conntrack at 90%",
			setup: func(r *hostroot.Root) { r.SetConntrack(235930, 262144) },
			want:  health.ReasonApproachingConntrackMax,
			msg:   "connection tracking table holds 235930 entries, 90.0% of net.netfilter.nf_conntrack_max 262144 (threshold 90%)",
		},
		{name: "conntrack just below", setup: func(r *hostroot.Root) { r.SetConntrack(235929, 262144) }},
		{name: "configured threshold", setup: func(r *hostroot.Root) { r.SetConntrack(200000, 262144) }, thr: 75, want: health.ReasonApproachingConntrackMax},
		{
			name: "nf_conntrack not loaded",
			setup: func(r *hostroot.Root) {
				r.Remove("proc/sys/net/netfilter")
			},
		},
		{
			name:    "half the conntrack files",
			setup:   func(r *hostroot.Root) { r.Remove("proc/sys/net/netfilter/nf_conntrack_max") },
			wantErr: true,
		},
		{name: "garbage count", setup: func(r *hostroot.Root) { r.WriteFile("proc/sys/net/netfilter/nf_conntrack_count", "lots\n") }, wantErr: true},
		{
			name: "forwarding off with a CNI",
			setup: func(r *hostroot.Root) {
				r.AddCNIConfig("05-cilium.conflist")
				r.WriteFile("proc/sys/net/ipv4/ip_forward", "0\n")
			},
			want: health.ReasonNetworkSysctl,
			msg:  `net.ipv4.ip_forward is "0", not 1, on a node with a CNI configured (05-cilium.conflist)`,
		},
		{
			name:  "forwarding off without a CNI (this machine)",
			setup: func(r *hostroot.Root) { r.WriteFile("proc/sys/net/ipv4/ip_forward", "0\n") },
		},
		{
			name: "non-config files in net.d do not count",
			setup: func(r *hostroot.Root) {
				r.WriteFile("etc/cni/net.d/README", "x")
				r.WriteFile("etc/cni/net.d/.kubeconfig/x", "x")
				r.WriteFile("proc/sys/net/ipv4/ip_forward", "0\n")
			},
		},
		{name: "no ip_forward", setup: func(r *hostroot.Root) { r.Remove("proc/sys/net/ipv4/ip_forward") }, wantErr: true},
		{name: "invalid threshold", thr: 150, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithNetSysctls()
			if tc.setup != nil {
				tc.setup(root)
			}
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonApproachingConntrackMax] = tc.thr
			}
			m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), thr), Options{})
			fs, err := runCheck(t, m, "net-sysctls")
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			var got []string
			for _, f := range fs {
				got = append(got, f.Reason)
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("findings %v, want %s", fs, tc.want)
			}
			if tc.msg != "" && !strings.Contains(fs[0].Message, tc.msg) {
				t.Fatalf("message %q, want %q", fs[0].Message, tc.msg)
			}
		})
	}
}
