package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitWorkload waits until replicas pods matching selector in namespace run
// Ready on distinct nodes, and returns pod name → node.
func (s *Sim) WaitWorkload(ctx context.Context, namespace, selector string, replicas int) (map[string]string, error) {
	var placed map[string]string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := s.Healthy(); err != nil {
			return false, err
		}
		pods, err := s.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		placed = map[string]string{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && podReady(p) {
				placed[p.Name] = p.Spec.NodeName
			}
		}
		return len(placed) >= replicas, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d pods %s in %s to run: %w", replicas, selector, namespace, err)
	}
	return placed, nil
}

// Nodes are the distinct nodes of a WaitWorkload result, sorted.
func Nodes(placed map[string]string) []string {
	var out []string
	for _, n := range placed {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// WaitCondition waits until node has condition t with status.
func (s *Sim) WaitCondition(ctx context.Context, node string, t corev1.NodeConditionType, status corev1.ConditionStatus) (*corev1.NodeCondition, error) {
	var found *corev1.NodeCondition
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for i, c := range n.Status.Conditions {
			if c.Type == t && c.Status == status {
				found = &n.Status.Conditions[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s=%s on node %s: %w", t, status, node, err)
	}
	return found, nil
}
