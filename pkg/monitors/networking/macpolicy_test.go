package networking

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

// ubuntuDefaultLink is /usr/lib/systemd/network/99-default.link as systemd
// 249 ships it (Ubuntu 22.04).
const ubuntuDefaultLink = `#  SPDX-License-Identifier: MIT-0
#
#  This config file is installed as part of systemd.
#  It may be freely copied and edited (following the MIT No Attribution license).

[Match]
OriginalName=*

[Link]
NamePolicy=keep kernel database onboard slot path
AlternativeNamesPolicy=database onboard slot path
MACAddressPolicy=persistent
`

// addInterface writes sysfs and udev's database entry for one interface,
// as systemd-udevd records it (src/libsystemd/sd-device/device-private.c:
// "E:" properties).
func addInterface(root *hostroot.Root, name string, ifindex int, driver, linkFile string, extra ...string) {
	root.WriteFile("sys/class/net/"+name+"/ifindex", fmt.Sprintf("%d\n", ifindex))
	lines := []string{"I:1773480413123456", "E:ID_NET_NAME_MAC=enx0e334a641829"}
	if driver != "" {
		lines = append(lines, "E:ID_NET_DRIVER="+driver)
	}
	if linkFile != "" {
		lines = append(lines, "E:ID_NET_LINK_FILE="+linkFile)
	}
	lines = append(lines, extra...)
	lines = append(lines, "E:ID_NET_NAME="+name, "E:SYSTEMD_ALIAS=/sys/subsystem/net/devices/"+name, "G:systemd", "Q:systemd", "V:1")
	root.WriteFile(fmt.Sprintf("run/udev/data/n%d", ifindex), strings.Join(lines, "\n")+"\n")
}

func awsNodePod(image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "aws-node-x7k2p", Labels: map[string]string{"k8s-app": "aws-node"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "aws-node", Image: image},
			{Name: "aws-eks-nodeagent", Image: "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-network-policy-agent:v1.2.0-eksbuild.1"},
		}},
	}
}

const oldCNI = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1"

func TestMACAddressPolicyCheck(t *testing.T) {
	ubuntuNode := func(r *hostroot.Root) {
		r.AddCNIConfig("10-aws.conflist")
		r.WriteFile("usr/lib/systemd/network/99-default.link", ubuntuDefaultLink)
		addInterface(r, "lo", 1, "", "")
		addInterface(r, "ens5", 2, "ena", "/usr/lib/systemd/network/99-default.link")
		addInterface(r, "eni4bd1086a8e2", 4, "veth", "/usr/lib/systemd/network/99-default.link")
		addInterface(r, "eni9c0d1e2f3a4", 5, "veth", "/usr/lib/systemd/network/99-default.link")
	}
	for _, tc := range []struct {
		name  string
		setup func(*hostroot.Root)
		image string
		want  string
		msg   string
	}{
		{
			name:  "Ubuntu's default link file on pod veths, VPC CNI 1.19",
			setup: ubuntuNode, image: oldCNI,
			want: health.ReasonMACAddressPolicyMisconfigured + "//usr/lib/systemd/network/99-default.link",
			msg:  "/usr/lib/systemd/network/99-default.link sets MACAddressPolicy=persistent and udev applied it to 2 pod veths (eni4bd1086a8e2, ...) on a VPC CNI older than v1.20.1",
		},
		{
			name: "fixed by a drop-in in /etc (AWS's documented workaround)",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("etc/systemd/network/99-default.link.d/10-eks.conf", "[Link]\nMACAddressPolicy=none\n")
			},
			image: oldCNI,
		},
		{
			name: "a drop-in of /etc hides one of the same name in /usr/lib",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("usr/lib/systemd/network/99-default.link.d/10-eks.conf", "[Link]\nMACAddressPolicy=none\n")
				r.WriteFile("etc/systemd/network/99-default.link.d/10-eks.conf", "[Link]\nNamePolicy=keep\n")
			},
			image: oldCNI,
			want:  health.ReasonMACAddressPolicyMisconfigured + "//usr/lib/systemd/network/99-default.link",
		},
		{
			name: "an empty assignment resets the policy",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("run/systemd/network/99-default.link.d/50-reset.conf", "# reset\n[Link]\nMACAddressPolicy=\n")
			},
			image: oldCNI,
		},
		{
			name: "the policy in another section does not count",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("usr/lib/systemd/network/99-default.link", "[Match]\nOriginalName=*\nMACAddressPolicy=persistent\n[Link]\nNamePolicy=kernel\n")
			},
			image: oldCNI,
		},
		{
			name: "a dedicated veth link file with none",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("etc/systemd/network/50-veth.link", "[Match]\nDriver=veth\n\n[Link]\nMACAddressPolicy=none\n")
				addInterface(r, "eni4bd1086a8e2", 4, "veth", "/etc/systemd/network/50-veth.link")
				addInterface(r, "eni9c0d1e2f3a4", 5, "veth", "/etc/systemd/network/50-veth.link")
			},
			image: oldCNI,
		},
		{
			name: "drop-ins recorded by udev (systemd 254+) count too",
			setup: func(r *hostroot.Root) {
				ubuntuNode(r)
				r.WriteFile("etc/nodemend-test/extra.conf", "[Link]\nMACAddressPolicy=none\n")
				addInterface(r, "eni4bd1086a8e2", 4, "veth", "/usr/lib/systemd/network/99-default.link", "E:ID_NET_LINK_FILE_DROPINS=/etc/nodemend-test/extra.conf")
				addInterface(r, "eni9c0d1e2f3a4", 5, "veth", "/usr/lib/systemd/network/99-default.link", "E:ID_NET_LINK_FILE_DROPINS=/etc/nodemend-test/extra.conf")
			},
			image: oldCNI,
		},
		{name: "the VPC CNI sets the veth MAC itself since v1.20.1", setup: ubuntuNode, image: "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.20.1-eksbuild.1"},
		{name: "a version that cannot be read is not held against the node", setup: ubuntuNode, image: "my-registry.example/amazon-k8s-cni@sha256:0a1b2c3d"},
		{name: "no aws-node pod", setup: ubuntuNode},
		{name: "no VPC CNI", setup: func(r *hostroot.Root) {
			ubuntuNode(r)
			r.Remove("etc/cni/net.d/10-aws.conflist")
		}, image: oldCNI},
		{name: "no pod veths yet", setup: func(r *hostroot.Root) {
			ubuntuNode(r)
			r.Remove("sys/class/net/eni4bd1086a8e2")
			r.Remove("sys/class/net/eni9c0d1e2f3a4")
		}, image: oldCNI},
		{name: "veths udev has not processed", setup: func(r *hostroot.Root) {
			ubuntuNode(r)
			r.Remove("run/udev/data/n4")
			r.Remove("run/udev/data/n5")
		}, image: oldCNI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t)
			tc.setup(root)
			var pods []*corev1.Pod
			if tc.image != "" {
				pods = append(pods, awsNodePod(tc.image))
			}
			m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{Pods: func() ([]*corev1.Pod, error) { return pods, nil }})
			fs, err := runCheck(t, m, "net-mac-address-policy")
			if err != nil {
				t.Fatal(err)
			}
			if got := reasons(fs); got != tc.want {
				t.Fatalf("findings %q, want %q (%v)", got, tc.want, fs)
			}
			if tc.msg != "" && !strings.HasPrefix(fs[0].Message, tc.msg) {
				t.Fatalf("message %q\nwant prefix %q", fs[0].Message, tc.msg)
			}
		})
	}
}

func TestMACPolicyErrors(t *testing.T) {
	root := hostroot.New(t)
	root.AddCNIConfig("10-aws.conflist")
	addInterface(root, "eni4bd1086a8e2", 4, "veth", "/usr/lib/systemd/network/99-default.link") // the file is missing
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{Pods: func() ([]*corev1.Pod, error) { return []*corev1.Pod{awsNodePod(oldCNI)}, nil }})
	if _, err := runCheck(t, m, "net-mac-address-policy"); err == nil || !strings.Contains(err.Error(), "99-default.link") {
		t.Fatalf("a link file udev names but that cannot be read: %v", err)
	}
	m = New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{Pods: func() ([]*corev1.Pod, error) { return nil, fmt.Errorf("pod cache not synced yet") }})
	if _, err := runCheck(t, m, "net-mac-address-policy"); err == nil {
		t.Fatal("the pod cache not synced must be an error, not a verdict")
	}
}

func TestParseVersion(t *testing.T) {
	for tag, want := range map[string][3]int{
		"v1.19.2-eksbuild.1": {1, 19, 2}, "v1.20.1": {1, 20, 1}, "1.18.0": {1, 18, 0},
		"latest": {}, "v1.19": {}, "v1.x.2": {},
	} {
		if got := parseVersion(tag); got != want {
			t.Errorf("%s: %v, want %v", tag, got, want)
		}
	}
}
