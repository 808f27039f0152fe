package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
)

// BenchmarkKmsgLineToCondition measures the time from a Fatal kmsg line
// being appended to the host's kmsg to the node condition reflecting it, as
// seen by a watch on the real API server. The first line flips KernelReady
// to False; each later line (another host cgroup) adds an active fault, which
// changes the condition message. Reports p50/p99 in ms.
func BenchmarkKmsgLineToCondition(b *testing.B) {
	t := &testing.T{}
	root := hostroot.New(b).WithProc()
	r := startAgentB(b, t, root)
	defer r.stop()

	w, err := client.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", r.node).String()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := fmt.Sprintf("and %d more active", i)
		written := time.Now()
		root.AppendKmsg(kmsgRec(i+1, fmt.Sprintf("cgroup: fork rejected by pids controller in /system.slice/bench-%d.service", i)))
		for {
			ev := <-w.ResultChan()
			if ev.Type != watch.Modified {
				continue
			}
			c := condition(ev.Object.(*corev1.Node), health.KernelReady)
			if c != nil && c.Status == corev1.ConditionFalse && (i == 0 || strings.Contains(c.Message, want)) {
				lat = append(lat, time.Since(written))
				break
			}
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

type benchAgent struct {
	node string
	stop func()
}

func startAgentB(b *testing.B, t *testing.T, root *hostroot.Root) benchAgent {
	b.Helper()
	node := fmt.Sprintf("bench-node-%d", seq.Add(1))
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("agent.yaml", fileJournal)
	a, err := New(Options{Client: agentClient, NodeName: node, HostRoot: root.Path(""), ConfigPath: root.Path("agent.yaml"), Hosts: monitors.Hosts{Timex: syncedClock{}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && condition(n, health.KernelReady) != nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("agent did not publish KernelReady")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = t
	return benchAgent{node: node, stop: func() { cancel(); <-done }}
}
