package explain

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// SchedulerItem is one reason of a FailedScheduling message, with the
// number of nodes it applies to (0 when the message gives none).
type SchedulerItem struct {
	Nodes  int
	Reason string
}

// ParseScheduler splits kube-scheduler's FailedScheduling message:
//
//	0/5 nodes are available: 1 Insufficient cpu, 4 node(s) had untolerated taint {k: v}. preemption: ...
//
// into its total and items. The preemption part (what preemption would do)
// is dropped. ok is false for messages of another shape.
func ParseScheduler(msg string) (total int, items []SchedulerItem, ok bool) {
	head, rest, found := strings.Cut(msg, " nodes are available: ")
	if !found {
		return 0, nil, false
	}
	if _, t, ok := strings.Cut(head, "/"); ok {
		total, _ = strconv.Atoi(strings.TrimSpace(t))
	}
	if i := strings.Index(rest, " preemption: "); i >= 0 {
		rest = rest[:i]
	}
	rest = strings.TrimSuffix(strings.TrimSpace(rest), ".")
	// Items are ", "-separated and start with a count; text inside an item
	// (a taint's "{k: v}") has no ", " followed by a digit.
	var cur string
	for _, part := range strings.Split(rest, ", ") {
		if cur != "" && !startsWithCount(part) {
			cur += ", " + part
			continue
		}
		if cur != "" {
			items = append(items, item(cur))
		}
		cur = part
	}
	if cur != "" {
		items = append(items, item(cur))
	}
	return total, items, true
}

func startsWithCount(s string) bool {
	n, _, ok := strings.Cut(s, " ")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

func item(s string) SchedulerItem {
	n, text, ok := strings.Cut(s, " ")
	if c, err := strconv.Atoi(n); ok && err == nil {
		return SchedulerItem{Nodes: c, Reason: text}
	}
	return SchedulerItem{Reason: s}
}

// schedulerFindings explains each item of the scheduler's message.
func schedulerFindings(pod *corev1.Pod, nodes []corev1.Node, msg string) []Finding {
	total, items, ok := ParseScheduler(msg)
	if !ok {
		return []Finding{{Cause: "the scheduler cannot place the pod", Fix: "read the scheduler's message", Evidence: []string{msg}, Source: "default-scheduler", Blocking: true}}
	}
	var out []Finding
	for _, it := range items {
		f := schedulerItem(pod, nodes, it, total, items)
		f.Evidence = append([]string{fmt.Sprintf("default-scheduler: %q", msg)}, f.Evidence...)
		f.Source, f.Blocking = "default-scheduler", true
		out = append(out, f)
	}
	return out
}

func nodesText(it SchedulerItem, total int) string {
	if it.Nodes == 0 {
		return "every node"
	}
	if total > 0 {
		return fmt.Sprintf("%d of %d nodes", it.Nodes, total)
	}
	return fmt.Sprintf("%d nodes", it.Nodes)
}

func schedulerItem(pod *corev1.Pod, nodes []corev1.Node, it SchedulerItem, total int, items []SchedulerItem) Finding {
	r := it.Reason
	where := nodesText(it, total)
	switch {
	case strings.HasPrefix(r, "Insufficient "):
		return insufficient(pod, nodes, strings.TrimPrefix(r, "Insufficient "), where)
	case r == "Too many pods":
		return Finding{Cause: where + " already run their maximum number of pods (kubelet maxPods)",
			Fix: "add nodes, or raise the kubelet's maxPods where the CNI allows it (on EKS the VPC CNI's IP limit per instance type sets it)"}
	case strings.Contains(r, "untolerated taint") || strings.Contains(r, "had taint"):
		return untolerated(pod, nodes, r, where)
	case strings.Contains(r, "scheduler-enforced node affinity"):
		return Finding{Cause: where + " are outside the node affinity the scheduler's profile adds to every pod it schedules (NodeAffinity addedAffinity)",
			Fix: "the pod's spec.schedulerName (" + schedulerName(pod) + ") names a profile limited to some nodes: use a profile or scheduler meant for this pod, or widen the profile's addedAffinity"}
	case strings.Contains(r, "node affinity/selector") || strings.Contains(r, "didn't match node selector") || strings.Contains(r, "didn't match Pod's node affinity"):
		// "node(s) didn't match Pod's node affinity/selector" (NodeAffinity
		// plugin, ErrReasonPod, since v1.20); older schedulers said
		// "node(s) didn't match node selector".
		return selectorMismatch(pod, nodes, it, total, items)
	case strings.Contains(r, "didn't satisfy existing pods anti-affinity"):
		return Finding{Cause: where + " run pods whose anti-affinity forbids this pod next to them",
			Fix: "those pods' podAntiAffinity excludes this pod's labels: change this pod's labels, relax their rule to preferredDuringScheduling, or add nodes (other topology domains)"}
	case strings.Contains(r, "pod anti-affinity"):
		return Finding{Cause: where + " are excluded by the pod's own podAntiAffinity (a matching pod already runs in their topology domain)",
			Evidence: affinityTerms(pod, false),
			Fix:      "add nodes in more topology domains (at least one per replica for a hostname rule), lower the replica count, or relax the rule to preferredDuringSchedulingIgnoredDuringExecution"}
	case strings.Contains(r, "pod affinity"):
		return Finding{Cause: where + " lack a pod that the pod's podAffinity requires in the same topology domain",
			Evidence: affinityTerms(pod, true),
			Fix:      "check that the pods the rule selects exist and are running (and in the namespaces it names), or relax it to preferredDuringSchedulingIgnoredDuringExecution"}
	case strings.Contains(r, "topology spread constraints"):
		f := Finding{Cause: where + " would break the pod's topology spread constraints", Evidence: spreadText(pod),
			Fix: "add capacity in the under-filled domains (zones/nodes), raise maxSkew, or use whenUnsatisfiable: ScheduleAnyway"}
		if strings.Contains(r, "missing required label") {
			f.Cause = where + " lack the label a topology spread constraint spreads over (its topologyKey)"
			f.Fix = "label those nodes with the topologyKey (cloud nodes get topology.kubernetes.io/zone from the cloud provider), or exclude them with nodeAffinityPolicy/a node selector"
		}
		return f
	case strings.Contains(r, "exceed max volume count"):
		return Finding{Cause: where + " reached their volume attach limit (CSINode allocatable count of the CSI driver)",
			Fix: "spread the volumes' pods over more nodes, use instance types with more attachment slots, or fewer volumes per node (each EBS/PD/Azure disk takes a slot)"}
	case strings.Contains(r, "volume node affinity conflict"):
		return Finding{Cause: where + " are outside the topology (usually the zone) of a persistent volume the pod uses",
			Fix: "schedule the pod in the volume's zone (node in that zone), or use a StorageClass with volumeBindingMode: WaitForFirstConsumer so new volumes follow the pod"}
	case strings.Contains(r, "unbound immediate PersistentVolumeClaims") || strings.Contains(r, "find available persistent volumes"):
		return Finding{Cause: "a PersistentVolumeClaim of the pod is not bound to a volume",
			Fix: "see the claim's events (`kubectl describe pvc`): its StorageClass provisioner must be installed and able to create the volume"}
	case strings.Contains(r, "were unschedulable"):
		return Finding{Cause: where + " are cordoned (spec.unschedulable)", Fix: "uncordon them (`kubectl uncordon NODE`) or add nodes"}
	case strings.Contains(r, "free ports"):
		return Finding{Cause: where + " already use a hostPort the pod asks for", Fix: "drop the hostPort, or run at most one such pod per node (a DaemonSet)"}
	case strings.Contains(r, "requested node name"):
		return Finding{Cause: "the pod names a node (spec.nodeName or a metadata.name affinity) that is not among the schedulable ones", Fix: "fix the node name, or remove it to let the scheduler choose"}
	}
	return Finding{Cause: where + ": " + r, Fix: "see the scheduler plugin that reports it"}
}

func taintText(key, value string) string {
	if value == "" {
		return key
	}
	return key + "=" + value
}

// podRequest is the pod's effective request of r: the sum over containers,
// or the largest init container's if larger, plus overhead (as the
// scheduler counts it, without sidecar subtleties).
func podRequest(pod *corev1.Pod, r corev1.ResourceName) resource.Quantity {
	var sum resource.Quantity
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Requests[r]; ok {
			sum.Add(q)
		} else if q, ok := c.Resources.Limits[r]; ok {
			sum.Add(q) // extended resources: request defaults to the limit
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if q, ok := c.Resources.Requests[r]; ok && q.Cmp(sum) > 0 {
			sum = q.DeepCopy()
		}
	}
	if q, ok := pod.Spec.Overhead[r]; ok {
		sum.Add(q)
	}
	return sum
}

func insufficient(pod *corev1.Pod, nodes []corev1.Node, res, where string) Finding {
	name := corev1.ResourceName(res)
	req := podRequest(pod, name)
	var offering int
	var largest resource.Quantity
	for i := range nodes {
		q, ok := nodes[i].Status.Allocatable[name]
		if ok && !q.IsZero() {
			offering++
			if q.Cmp(largest) > 0 {
				largest = q.DeepCopy()
			}
		}
	}
	builtin := name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage || name == corev1.ResourcePods
	if !builtin && offering == 0 {
		f := Finding{
			Cause:    fmt.Sprintf("no node offers %s: the resource is not registered on any node", res),
			Evidence: []string{fmt.Sprintf("the pod requests %s %s; node allocatable has no %s anywhere", req.String(), res, res)},
			Fix: fmt.Sprintf("the device plugin that advertises %s is not running, or no node has the device: "+
				"install or fix the plugin (for nvidia.com/gpu the NVIDIA device plugin or GPU Operator DaemonSet) and check it runs on the GPU nodes; "+
				"with Karpenter, allow instance types that have the device in a NodePool", res),
		}
		if n := failedAccelerators(nodes); n > 0 {
			f.Evidence = append(f.Evidence, fmt.Sprintf("%d node(s) report AcceleratedHardwareReady=False: their devices may have failed (`kubectl mend status`)", n))
		}
		return f
	}
	f := Finding{
		Cause:    fmt.Sprintf("not enough free %s on %s", res, where),
		Evidence: []string{fmt.Sprintf("the pod requests %s %s; the largest node allocatable is %s (%d node(s) offer it)", req.String(), res, largest.String(), offering)},
		Fix:      fmt.Sprintf("lower the pod's %s request if it is oversized, or add capacity (scale the pool; with Karpenter, check its events on this pod and the NodePool limits)", res),
	}
	if offering > 0 && req.Cmp(largest) > 0 {
		f.Cause = fmt.Sprintf("the pod requests more %s than any node has (%s > %s)", res, req.String(), largest.String())
		f.Fix = fmt.Sprintf("lower the %s request, or add larger nodes (with Karpenter, allow larger instance types in a NodePool)", res)
	}
	return f
}

func failedAccelerators(nodes []corev1.Node) int {
	n := 0
	for i := range nodes {
		for _, c := range nodes[i].Status.Conditions {
			if c.Type == "AcceleratedHardwareReady" && c.Status == corev1.ConditionFalse {
				n++
			}
		}
	}
	return n
}

// selectorMismatch explains the NodeAffinity plugin's refusal: which
// nodes match the pod's whole node selection (nodeSelector AND one of the
// required terms, matched as the scheduler does, matchFields included),
// and for what matches nothing, the values the nodes have.
func selectorMismatch(pod *corev1.Pod, nodes []corev1.Node, it SchedulerItem, total int, items []SchedulerItem) Finding {
	where := nodesText(it, total)
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	var matching []string
	for i := range nodes {
		if ok, _ := required.Match(&nodes[i]); ok {
			matching = append(matching, nodes[i].Name)
		}
	}
	unmatched := unmatchedSelection(pod, nodes)
	f := Finding{Cause: where + " do not match the pod's nodeSelector / required node affinity", Evidence: unmatched,
		Fix: "fix the selector/affinity to labels the nodes have, or label the intended nodes (with Karpenter: a NodePool whose requirements or labels provide them)"}
	switch {
	case len(matching) == 0 && len(unmatched) > 0:
		f.Cause = "the pod's node selection matches no node: " + unmatched[0]
	case len(matching) == 0:
		f.Cause = "the pod's node selection matches no node: each part matches some node, but no node matches all of them"
	default:
		others := make([]string, 0, len(items))
		for _, o := range items {
			if o.Reason != it.Reason {
				others = append(others, fmt.Sprintf("%d %s", o.Nodes, o.Reason))
			}
		}
		f.Cause = fmt.Sprintf("%s do not match the pod's node selection; the %d that match (%s) are refused for the scheduler's other reasons", where, len(matching), list(matching))
		if len(others) > 0 {
			f.Evidence = append(f.Evidence, "the nodes that match are refused for: "+strings.Join(others, ", "))
		}
		f.Fix = "the selection is not the problem on its own: fix the other findings for the matching nodes, or widen the selection to more nodes"
	}
	return f
}

// unmatchedSelection names each nodeSelector entry and required node
// affinity expression that no node satisfies, with the values the nodes
// have; a term (terms are ORed) whose expressions each match some node but
// never together is named as a whole.
func unmatchedSelection(pod *corev1.Pod, nodes []corev1.Node) []string {
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unmatched []string
	for _, k := range keys {
		v := pod.Spec.NodeSelector[k]
		if matching(nodes, func(l labels.Set) bool { return l[k] == v }) == 0 {
			unmatched = append(unmatched, fmt.Sprintf("nodeSelector %s=%s matches no node (values present: %s)", k, v, valuesOf(nodes, k)))
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return unmatched
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for ti, term := range terms {
		prefix := "node affinity"
		if len(terms) > 1 {
			prefix = fmt.Sprintf("node affinity term %d of %d", ti+1, len(terms))
		}
		alone := 0
		for _, e := range term.MatchExpressions {
			req, err := labels.NewRequirement(e.Key, nodeOp(e.Operator), e.Values)
			if err != nil {
				continue
			}
			if matching(nodes, func(l labels.Set) bool { return req.Matches(l) }) == 0 {
				unmatched = append(unmatched, fmt.Sprintf("%s %s matches no node (values present: %s)", prefix, req.String(), valuesOf(nodes, e.Key)))
				alone++
			}
		}
		for _, e := range term.MatchFields {
			if e.Key == metav1ObjectName && !anyNodeNamed(nodes, e) {
				unmatched = append(unmatched, fmt.Sprintf("%s matchFields metadata.name %s %v matches no node", prefix, e.Operator, e.Values))
				alone++
			}
		}
		single := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
		if ns, err := nodeaffinity.NewNodeSelector(single); err == nil && alone == 0 {
			n := 0
			for i := range nodes {
				if ns.Match(&nodes[i]) {
					n++
				}
			}
			if n == 0 {
				unmatched = append(unmatched, prefix+": each of its expressions matches some node, but no node matches all of them together")
			}
		}
	}
	return unmatched
}

// metav1ObjectName is the one field a node selector term may match.
const metav1ObjectName = "metadata.name"

func anyNodeNamed(nodes []corev1.Node, e corev1.NodeSelectorRequirement) bool {
	for i := range nodes {
		in := slices.Contains(e.Values, nodes[i].Name)
		if (e.Operator == corev1.NodeSelectorOpIn && in) || (e.Operator == corev1.NodeSelectorOpNotIn && !in) {
			return true
		}
	}
	return false
}

func schedulerName(pod *corev1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return corev1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}

func nodeOp(op corev1.NodeSelectorOperator) selection.Operator {
	switch op {
	case corev1.NodeSelectorOpIn:
		return selection.In
	case corev1.NodeSelectorOpNotIn:
		return selection.NotIn
	case corev1.NodeSelectorOpExists:
		return selection.Exists
	case corev1.NodeSelectorOpDoesNotExist:
		return selection.DoesNotExist
	case corev1.NodeSelectorOpGt:
		return selection.GreaterThan
	case corev1.NodeSelectorOpLt:
		return selection.LessThan
	}
	return selection.Equals
}

func matching(nodes []corev1.Node, ok func(labels.Set) bool) int {
	n := 0
	for i := range nodes {
		if ok(nodes[i].Labels) {
			n++
		}
	}
	return n
}

func valuesOf(nodes []corev1.Node, key string) string {
	var vs []string
	for i := range nodes {
		if v, ok := nodes[i].Labels[key]; ok && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return "no node has the label"
	}
	sort.Strings(vs)
	if len(vs) > 8 {
		vs = append(vs[:8], "…")
	}
	return strings.Join(vs, ", ")
}

func affinityTerms(pod *corev1.Pod, affinity bool) []string {
	a := pod.Spec.Affinity
	if a == nil {
		return nil
	}
	var terms []corev1.PodAffinityTerm
	if affinity && a.PodAffinity != nil {
		terms = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if !affinity && a.PodAntiAffinity != nil {
		terms = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	var out []string
	for _, t := range terms {
		sel := "<none>"
		if t.LabelSelector != nil {
			sel = labelSelectorText(t.LabelSelector.MatchLabels)
		}
		out = append(out, fmt.Sprintf("required rule: pods matching %s, topologyKey %s", sel, t.TopologyKey))
	}
	return out
}

func labelSelectorText(m map[string]string) string {
	return labels.SelectorFromSet(m).String()
}

func spreadText(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.TopologySpreadConstraints {
		sel := "<none>"
		if c.LabelSelector != nil {
			sel = labelSelectorText(c.LabelSelector.MatchLabels)
		}
		out = append(out, fmt.Sprintf("constraint: topologyKey %s, maxSkew %d, whenUnsatisfiable %s, pods matching %s", c.TopologyKey, c.MaxSkew, c.WhenUnsatisfiable, sel))
	}
	return out
}

// untolerated names the taints the pod does not tolerate. Since v1.33 the
// scheduler says only "node(s) had untolerated taint(s)"; older ones named
// one taint "{key: value}". Either way the nodes' taints are read and each
// untolerated NoSchedule/NoExecute taint is counted and classified.
func untolerated(pod *corev1.Pod, nodes []corev1.Node, msg, where string) Finding {
	counts := map[string]int{}
	var order []string
	var first corev1.Taint
	for i := range nodes {
		for _, t := range nodes[i].Spec.Taints {
			if t.Effect == corev1.TaintEffectPreferNoSchedule || tolerated(pod, &t) {
				continue
			}
			k := t.ToString()
			if counts[k] == 0 {
				order = append(order, k)
				if len(order) == 1 {
					first = t
				}
			}
			counts[k]++
		}
	}
	if len(order) == 0 {
		key, value := parseTaint(msg)
		if key == "" {
			return Finding{Cause: where + " have taints the pod does not tolerate", Fix: "compare the nodes' taints with the pod's tolerations"}
		}
		first = corev1.Taint{Key: key, Value: value}
		order = []string{taintText(key, value)}
		counts[order[0]] = 1
	}
	var ev []string
	for _, k := range order {
		ev = append(ev, fmt.Sprintf("%d node(s) have taint %s", counts[k], k))
	}
	meaning, fix := taintClass(first.Key)
	f := Finding{Cause: fmt.Sprintf("%s have taint %s the pod does not tolerate: %s", where, taintText(first.Key, first.Value), meaning), Fix: fix, Evidence: ev}
	if meaning == "dedicated to other workloads" && first.Effect != "" {
		f.Fix = fmt.Sprintf("if the pod belongs there, add to it: tolerations: [{key: %q, operator: Equal, value: %q, effect: %s}]; otherwise target other nodes", first.Key, first.Value, first.Effect)
	}
	if len(order) > 1 {
		f.Cause += fmt.Sprintf(" (and %d other taint(s), see evidence)", len(order)-1)
	}
	return f
}

func tolerated(pod *corev1.Pod, t *corev1.Taint) bool {
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].ToleratesTaint(klog.Background(), t, true) {
			return true
		}
	}
	return false
}
