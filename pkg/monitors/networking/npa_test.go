package networking

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/health"
)

// nodeAgentStatus sets the aws-eks-nodeagent container's status of pod.
func nodeAgentStatus(p *corev1.Pod, restarts int32, state corev1.ContainerState) {
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "aws-node", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "aws-eks-nodeagent", RestartCount: restarts, State: state},
	}
}

var (
	running  = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	crashing = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}}
)

// npaLogLine is a network-policy-agent.log record (zap production JSON,
// ISO 8601 time, pkg/logger).
func npaLogLine(ts time.Time, caller, msg string) string {
	return fmt.Sprintf(`{"level":"error","ts":"%s","caller":"%s","msg":%q}`+"\n", ts.UTC().Format("2006-01-02T15:04:05.000Z0700"), caller, msg)
}

func TestNetworkPolicyAgentInTheAWSNodePod(t *testing.T) {
	root := hostroot.New(t).WithProc()
	clk := clocktesting.NewFakePassiveClock(t0)
	pod := awsNodePod(oldCNI)
	nodeAgentStatus(pod, 0, running)
	var pods []*corev1.Pod
	m := New(testEnv(root, clk, nil), Options{Pods: func() ([]*corev1.Pod, error) { return pods, nil }})
	check := monitortest.Stepper(t, m, "net-network-policy-agent", clk, time.Minute)

	check("") // no aws-node pod: not deployed here
	pods = []*corev1.Pod{pod}
	check("")

	// Crash looping: restarts climb; not running for 15 minutes is Fatal.
	log := "var/log/aws-routed-eni/network-policy-agent.log"
	root.WriteFile(log, "")
	for i := int32(1); i <= 4; i++ {
		nodeAgentStatus(pod, i, crashing)
		check("")
	}
	nodeAgentStatus(pod, 5, crashing)
	check("NPARepeatedlyRestart/kube-system/aws-node-x7k2p")
	for range 10 {
		check("NPARepeatedlyRestart/kube-system/aws-node-x7k2p")
	}
	check("NPANotRunning/kube-system/aws-node-x7k2p,NPARepeatedlyRestart/kube-system/aws-node-x7k2p")
	fs, _ := runCheck(t, m, "net-network-policy-agent")
	if msg := fs[0].Message; !strings.Contains(msg, "not been running since 2026-03-14T09:28:53Z (waiting: CrashLoopBackOff)") {
		t.Fatalf("message %q", msg)
	}

	// Back up; its BPF state recovery fails twice.
	nodeAgentStatus(pod, 5, running)
	appendFile(t, root.Path(log), npaLogLine(clk.Now(), "ebpf/bpf_client.go:192", "Failed to recover the BPF state error: map not found"))
	check("NPARepeatedlyRestart/kube-system/aws-node-x7k2p")
	appendFile(t, root.Path(log), `{"level":"info","ts":"2026-03-14T09:45:00.000Z","msg":"Successfully attached ingress probe"}`+"\n"+
		npaLogLine(clk.Now(), "ebpf/bpf_client.go:461", "got err for ingress in-mem map for default/web-0, err key does not exist"))
	check("NPARepeatedlyRestart/kube-system/aws-node-x7k2p,NPABPFRecoveryError/kube-system/aws-node-x7k2p")

	// An hour on, quiet.
	clk.SetTime(clk.Now().Add(time.Hour))
	check("")

	// A new aws-node pod starts counting from zero.
	nodeAgentStatus(pod, 0, running)
	check("")
	// The pod without the agent's container (network policy agent not
	// part of this VPC CNI): not deployed.
	pods = []*corev1.Pod{awsNodePod(oldCNI)}
	pods[0].Spec.Containers = pods[0].Spec.Containers[:1]
	nodeAgentStatus(pods[0], 0, crashing)
	check("")
}

func TestNetworkPolicyAgentAsASystemdUnit(t *testing.T) {
	root := hostroot.New(t).WithProc()
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{Pods: func() ([]*corev1.Pod, error) { return nil, nil }})
	check := monitortest.Stepper(t, m, "net-network-policy-agent", clk, time.Minute)

	// A unit file that is not enabled: not deployed.
	root.WriteFile("usr/lib/systemd/system/aws-network-policy-agent.service", "[Unit]\nDescription=AWS Network Policy Agent\n[Service]\nExecStart=/usr/bin/aws-network-policy-agent\nRestart=always\n[Install]\nWantedBy=multi-user.target\n")
	check("")
	root.Symlink("etc/systemd/system/multi-user.target.wants/aws-network-policy-agent.service", "/usr/lib/systemd/system/aws-network-policy-agent.service")

	agent := func(pid int) {
		root.AddProcess(hostroot.Process{PID: pid, PPID: 1, Comm: "aws-network-pol", State: 'S'})
		root.WriteFile(fmt.Sprintf("proc/%d/cgroup", pid), "0::/system.slice/aws-network-policy-agent.service\n")
	}
	for _, p := range hostroot.DefaultProcesses {
		root.WriteFile(fmt.Sprintf("proc/%d/cgroup", p.PID), "0::/system.slice/containerd.service\n")
	}
	agent(3100)
	check("")
	// Restarting: a new PID each minute, five in an hour.
	for i := 1; i <= 4; i++ {
		root.Remove(fmt.Sprintf("proc/%d", 3100+i-1))
		agent(3100 + i)
		check("")
	}
	root.Remove("proc/3104")
	agent(3105)
	check("NPARepeatedlyRestart/aws-network-policy-agent.service")

	// Gone: Fatal after 15 minutes.
	root.Remove("proc/3105")
	for range 15 {
		check("NPARepeatedlyRestart/aws-network-policy-agent.service")
	}
	check("NPANotRunning/aws-network-policy-agent.service,NPARepeatedlyRestart/aws-network-policy-agent.service")
	agent(3200)
	check("NPARepeatedlyRestart/aws-network-policy-agent.service")
	clk.SetTime(clk.Now().Add(time.Hour))
	check("")
	if r, _ := health.LookupReason(health.ReasonNPANotRunning); r.Severity != health.Fatal {
		t.Fatalf("NPANotRunning is %s in the registry", r.Severity)
	}
}
