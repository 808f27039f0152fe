package controlplane

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, ready bool, labels map[string]string) corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

// staticPod is a kubeadm static pod's mirror as the kubelet creates it.
func staticPod(component, node string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: component + "-" + node, Namespace: "kube-system",
			Labels:      map[string]string{"component": component, "tier": "control-plane"},
			Annotations: map[string]string{MirrorAnnotation: "3f2a"}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func TestRoleOf(t *testing.T) {
	worker := node("w1", true, map[string]string{"node-role.kubernetes.io/worker": ""})
	for _, tc := range []struct {
		name string
		node corev1.Node
		pods []corev1.Pod
		want Role
	}{
		{"a worker", worker, nil, Role{}},
		{"the role label", node("cp1", true, map[string]string{RoleLabel: ""}), nil, Role{Labeled: true}},
		{"the legacy label", node("cp1", true, map[string]string{LegacyRoleLabel: ""}), nil, Role{Labeled: true}},
		{"an unlabelled node running etcd and an API server", node("cp1", true, nil),
			[]corev1.Pod{staticPod("etcd", "cp1", true), staticPod("kube-apiserver", "cp1", true)}, Role{Etcd: true, APIServer: true}},
		{"a pod named like etcd that is no static pod", worker, func() []corev1.Pod {
			p := staticPod("etcd", "w1", true)
			delete(p.Annotations, MirrorAnnotation)
			return []corev1.Pod{p}
		}(), Role{}},
		{"a mirror pod in a tenant's namespace", worker, func() []corev1.Pod {
			p := staticPod("etcd", "w1", true)
			p.Namespace = "team-a"
			return []corev1.Pod{p}
		}(), Role{}},
		{"another node's etcd", worker, []corev1.Pod{staticPod("etcd", "cp1", true)}, Role{}},
		{"named by the kubelet, no component label", node("cp1", true, nil), func() []corev1.Pod {
			p := staticPod("kube-apiserver", "cp1", true)
			delete(p.Labels, "component")
			return []corev1.Pod{p}
		}(), Role{APIServer: true}},
	} {
		n := tc.node
		if got := RoleOf(&n, tc.pods); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestQuorum(t *testing.T) {
	m := func(healthy ...bool) []Member {
		var out []Member
		for i, h := range healthy {
			out = append(out, Member{Node: string(rune('a' + i)), Healthy: h})
		}
		return out
	}
	for _, tc := range []struct {
		members []Member
		without string
		want    bool
	}{
		{m(true, true, true), "a", true},   // 2 of 3 left, 2 needed
		{m(false, true, true), "a", true},  // the broken member itself goes
		{m(true, false, true), "a", false}, // 1 of 3 left
		{m(true), "a", false},              // a single member
		{m(true, true, true, true, true), "a", true},
		{m(true, true, true, false, false), "a", false}, // 2 of 5 left, 3 needed
		{m(true, true), "a", false},                     // 1 of 2, 2 needed
	} {
		if got, why := Quorum(tc.members, tc.without); got != tc.want {
			t.Errorf("%+v without %s: %v (%s), want %v", tc.members, tc.without, got, why, tc.want)
		}
	}
}

// Not repaired unless opted in; then one at a time, never the last Ready
// one, and an etcd member only while the others keep quorum — each
// refusal says why.
func TestDecide(t *testing.T) {
	etcdRole := Role{Labeled: true, Etcd: true, APIServer: true}
	three := []Member{{"cp1", false}, {"cp2", true}, {"cp3", true}}
	for _, tc := range []struct {
		name string
		in   Input
		want string // "" = allowed
	}{
		{"not opted in", Input{Node: "cp1", Role: etcdRole, Peers: []Peer{{"cp2", true, false}}},
			"control-plane nodes are not repaired unless the node's NodeRepairPolicy opts them in"},
		{"opted in, healthy peers", Input{Node: "cp1", Role: etcdRole, OptedIn: true, Policy: "cp", Members: three,
			Peers: []Peer{{"cp2", true, false}, {"cp3", true, false}}}, ""},
		{"another under repair", Input{Node: "cp1", Role: etcdRole, OptedIn: true, Members: three,
			Peers: []Peer{{"cp2", true, true}, {"cp3", true, false}}}, "cp2 is under repair, and control-plane nodes are repaired one at a time"},
		{"the last Ready one", Input{Node: "cp1", Role: Role{Labeled: true}, OptedIn: true,
			Peers: []Peer{{"cp2", false, false}}}, "it is the last Ready control-plane node"},
		{"a single control-plane node", Input{Node: "cp1", Role: Role{Labeled: true}, OptedIn: true}, "it is the last Ready control-plane node"},
		{"quorum would be lost", Input{Node: "cp1", Role: etcdRole, OptedIn: true, Members: []Member{{"cp1", true}, {"cp2", true}, {"cp3", false}},
			Peers: []Peer{{"cp2", true, false}, {"cp3", true, false}}}, "etcd would lose quorum: without cp1, 1 of the 3 etcd members are healthy, 2 needed for quorum (not healthy: cp3)"},
		{"an API server without etcd", Input{Node: "cp1", Role: Role{APIServer: true}, OptedIn: true, Members: []Member{{"cp2", true}, {"cp3", false}},
			Peers: []Peer{{"cp2", true, false}}}, ""},
	} {
		d := Decide(tc.in)
		switch {
		case tc.want == "" && !d.Allowed:
			t.Errorf("%s: refused: %s", tc.name, d.Message)
		case tc.want != "" && (d.Allowed || !strings.Contains(d.Message, tc.want)):
			t.Errorf("%s: %+v, want refused saying %q", tc.name, d, tc.want)
		}
	}
}

func TestMembersOf(t *testing.T) {
	nodes := []corev1.Node{node("cp1", true, nil), node("cp2", false, nil), node("cp3", true, nil)}
	pods := []corev1.Pod{staticPod("etcd", "cp1", true), staticPod("etcd", "cp2", true), staticPod("etcd", "cp3", false), staticPod("kube-apiserver", "cp1", true)}
	got := MembersOf(nodes, pods)
	want := []Member{{"cp1", true}, {"cp2", false}, {"cp3", false}} // cp2's pod readiness is stale: its kubelet is not Ready
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
