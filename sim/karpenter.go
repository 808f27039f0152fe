package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Karpenter's and its kwok provider's resources.
var (
	NodePoolGVR        = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	NodeClaimGVR       = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	KWOKNodeClassGVR   = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
	NodeRepairPolicyG  = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderepairpolicies"}
	NodeDiagnosticGVR  = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "nodediagnostics"}
	NodeRemediationGVR = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderemediations"}
)

// KwokAnnotation marks the nodes kwok acts as the kubelet of; Karpenter's
// kwok provider sets it on every node it launches.
const KwokAnnotation = "kwok.x-k8s.io/node"

// NodeClassName is the KWOKNodeClass every NodePool of the simulation uses.
const NodeClassName = "default"

// Karpenter is the Karpenter process and the port of its metrics on the
// loopback interface (nil and 0 when Options.Karpenter is off).
func (s *Sim) Karpenter() (*Process, int) { return s.karpenter, s.karpenterMetricsPort }

// startKarpenter runs kwok (the fake kubelets) and Karpenter with its kwok
// provider, and creates the node class NodePools refer to.
func (s *Sim) startKarpenter(ctx context.Context) error {
	if err := s.StartKwok(); err != nil {
		return err
	}
	metrics, err := FreePort()
	if err != nil {
		return err
	}
	probe, err := FreePort()
	if err != nil {
		return err
	}
	// Karpenter's own node repair is off unless asked for: nodemend repairs.
	repair := "NodeRepair=false"
	if s.opts.KarpenterNodeRepair {
		repair = "NodeRepair=true"
	}
	env := []string{
		"KUBECONFIG=" + s.Kubeconfig,
		"SYSTEM_NAMESPACE=kube-system",
		"DISABLE_LEADER_ELECTION=true",
		fmt.Sprintf("METRICS_PORT=%d", metrics),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", probe),
		"LOG_LEVEL=info",
		"FEATURE_GATES=" + repair,
		// A demo's pods arrive together; don't wait 10 s for more.
		"BATCH_IDLE_DURATION=500ms", "BATCH_MAX_DURATION=3s",
	}
	if len(s.opts.Zones) > 0 {
		types, err := instanceTypes(s.opts.Zones)
		if err != nil {
			return err
		}
		file := filepath.Join(s.Dir, "instance-types.json")
		if err := os.WriteFile(file, types, 0o644); err != nil {
			return err
		}
		env = append(env, "INSTANCE_TYPES_FILE_PATH="+file)
	}
	p, err := s.start("karpenter", filepath.Join(s.bins.sim, "karpenter-kwok"), nil, env)
	if err != nil {
		return err
	}
	s.karpenter, s.karpenterMetricsPort = p, metrics
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
		"metadata": map[string]any{"name": NodeClassName},
	}}
	if _, err := s.Dynamic.Resource(KWOKNodeClassGVR).Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the KWOKNodeClass: %w", err)
	}
	// NodePools are only used once their class is Ready, which Karpenter
	// decides; wait so that a demo's first pods are not left pending.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.procs.exitedEarly(); err != nil {
			return false, err
		}
		u, err := s.Dynamic.Resource(KWOKNodeClassGVR).Get(ctx, NodeClassName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return conditionTrue(u, "Ready"), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Karpenter to make the KWOKNodeClass Ready (see %s): %w", filepath.Join(s.LogDir(), "karpenter.log"), err)
	}
	s.opts.Logf("kwok and Karpenter (kwok provider) running")
	return nil
}

// StartKwok runs kwok as the kubelet of every node annotated
// kwok.x-k8s.io/node=fake, with kwok's own stages: nodes initialize and
// renew their Lease, pods become Ready, and deleted pods go away; a node
// annotated HeartbeatStoppedAnnotation is left alone.
func (s *Sim) StartKwok() error {
	stages, err := filepath.Glob(filepath.Join(s.bins.sim, "kwok-stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stages in %s (hack/sim-binaries.sh copies them)", s.bins.sim)
	}
	var docs []string
	for _, f := range stages {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		docs = append(docs, string(b))
	}
	config, err := kwokStages(docs)
	if err != nil {
		return err
	}
	conf := filepath.Join(s.Dir, "kwok.yaml")
	if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
		return err
	}
	lease := s.opts.KwokLeaseSeconds
	if lease <= 0 {
		lease = 40
	}
	_, err = s.start("kwok", filepath.Join(s.bins.sim, "kwok"), []string{
		"--kubeconfig", s.Kubeconfig, "--config", conf,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", KwokAnnotation + "=fake",
		fmt.Sprintf("--node-lease-duration-seconds=%d", lease), "--server-address=",
	}, nil)
	return err
}

// conditionTrue reports whether an object's status has condition t True.
func conditionTrue(u *unstructured.Unstructured, t string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t && m["status"] == "True" {
			return true
		}
	}
	return false
}

// FreePort is a TCP port free on the loopback interface right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// kwokInstanceTypes are the instance types the simulation uses, as the
// kwok provider's own table defines them (name → resources), offered in
// Options.Zones when those are set.
func kwokInstanceTypes() map[string]corev1.ResourceList {
	return map[string]corev1.ResourceList{
		"c-1x-amd64-linux": {corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"), corev1.ResourcePods: resource.MustParse("16")},
		"c-4x-amd64-linux": {corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"), corev1.ResourcePods: resource.MustParse("64")},
	}
}

// instanceTypes is the kwok provider's instance-types file (its
// INSTANCE_TYPES_FILE_PATH, the format of its embedded table): each of
// kwokInstanceTypes, on demand, in each of zones.
func instanceTypes(zones []string) ([]byte, error) {
	type requirement struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	}
	type offering struct {
		Price        float64
		Available    bool
		Requirements []requirement
	}
	type instanceType struct {
		Name             string              `json:"name"`
		Offerings        []offering          `json:"offerings"`
		Architecture     string              `json:"architecture"`
		OperatingSystems []string            `json:"operatingSystems"`
		Resources        corev1.ResourceList `json:"resources"`
	}
	table := kwokInstanceTypes()
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []instanceType
	for _, n := range names {
		it := instanceType{Name: n, Architecture: "amd64", OperatingSystems: []string{"linux"}, Resources: table[n]}
		for _, z := range zones {
			it.Offerings = append(it.Offerings, offering{Price: 0.1, Available: true, Requirements: []requirement{
				{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{"on-demand"}},
				{Key: corev1.LabelTopologyZone, Operator: "In", Values: []string{z}},
			}})
		}
		out = append(out, it)
	}
	return json.MarshalIndent(out, "", "  ")
}
