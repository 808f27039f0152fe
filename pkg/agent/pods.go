package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/internal/coreclient"
)

// podCache lists this node's pods from an informer.
type podCache func() ([]*corev1.Pod, error)

// podSyncWait is how long the first listing waits for the informer's
// first list.
const podSyncWait = 10 * time.Second

// newPodCache caches this node's pods. The informer starts on the first
// listing: a node whose config runs no check that needs pods keeps no
// watch open and no pods in memory. It builds the one informer it needs
// rather than an informer factory, which would link informers for every
// API group into the agent.
func newPodCache(ctx context.Context, client *coreclient.Client, node string) podCache {
	var (
		once     sync.Once
		informer cache.SharedIndexInformer
	)
	return func() ([]*corev1.Pod, error) {
		once.Do(func() {
			informer = cache.NewSharedIndexInformer(client.PodsOnNode(node), &corev1.Pod{}, 10*time.Minute, cache.Indexers{})
			_ = informer.SetTransform(trimPod)
			go informer.Run(ctx.Done())
			wait, cancel := context.WithTimeout(ctx, podSyncWait)
			defer cancel()
			cache.WaitForCacheSync(wait.Done(), informer.HasSynced)
		})
		if !informer.HasSynced() {
			return nil, errors.New("pod cache not synced yet")
		}
		objs := informer.GetStore().List()
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			pods = append(pods, o.(*corev1.Pod))
		}
		return pods, nil
	}
}

// trimPod keeps of a pod what the runtime monitor reads (identity, node,
// deletion time): a node's pods with their specs, statuses and managed
// fields would be most of the agent's heap on a busy node.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}
