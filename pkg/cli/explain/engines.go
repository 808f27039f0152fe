package explain

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
)

// Condition is a status condition of a Karpenter or Cluster API object.
type Condition struct {
	Type, Status, Reason, Message string
	Time                          time.Time
}

// NodePool is what explain reads from a Karpenter NodePool.
type NodePool struct {
	Name       string
	Conditions []Condition
	// Limits is spec.limits; Usage is status.resources.
	Limits, Usage corev1.ResourceList
	// BudgetNodes are spec.disruption.budgets[].nodes ("10%", "0", ...).
	BudgetNodes []string
}

// NodeClaim is what explain reads from a Karpenter NodeClaim.
type NodeClaim struct {
	Name, NodePool, NodeName, ProviderID string
	Conditions                           []Condition
}

func condition(cs []Condition, t string) (Condition, bool) {
	for _, c := range cs {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// karpenterPrefix starts Karpenter's FailedScheduling on a pod (its
// provisioner, pkg/controllers/provisioning/scheduling/events:
// "Failed to schedule pod, %s"); the error lists one clause per NodePool,
// "incompatible with nodepool %q, daemonset overhead=%s, <why>", joined by "; ".
const karpenterPrefix = "Failed to schedule pod, "

// karpenterFindings explains Karpenter's last FailedScheduling on a pod.
func karpenterFindings(msg string) []Finding {
	body := strings.TrimPrefix(msg, karpenterPrefix)
	clauses := strings.Split(body, "; ")
	var per []string
	var fixes []string
	cause := "Karpenter cannot launch a node for the pod: it is incompatible with every NodePool"
	for _, c := range clauses {
		c = strings.TrimSpace(c)
		pool := ""
		if strings.HasPrefix(c, "incompatible with nodepool ") {
			rest := strings.TrimPrefix(c, "incompatible with nodepool ")
			if q, after, ok := strings.Cut(rest, ", "); ok {
				pool, c = strings.Trim(q, `"`), after
			}
			if i := strings.Index(c, "daemonset overhead="); i == 0 {
				if j := strings.Index(c, "}, "); j > 0 {
					c = c[j+3:]
				}
			}
		}
		why, fix := karpenterReason(c)
		if pool != "" {
			why = "NodePool " + pool + ": " + why
		}
		per = append(per, why+" ("+c+")")
		if !containsString(fixes, fix) {
			fixes = append(fixes, fix)
		}
	}
	if len(clauses) == 1 && !strings.HasPrefix(strings.TrimSpace(body), "incompatible with nodepool") {
		cause = "Karpenter cannot launch a node for the pod"
	}
	return []Finding{{Cause: cause, Evidence: append([]string{fmt.Sprintf("karpenter: %q", msg)}, per...),
		Fix: strings.Join(fixes, "; "), Source: eventlog.Karpenter, Blocking: true}}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// karpenterReason classifies one NodePool's refusal.
func karpenterReason(c string) (why, fix string) {
	switch {
	case containsAny(c, "did not tolerate"):
		return "the pod does not tolerate the NodePool's taints", "add the toleration to the pod, or use a NodePool without that taint"
	case containsAny(c, "incompatible requirements"):
		return "the pod's node selector/affinity asks for labels or values the NodePool does not allow",
			"align the pod's nodeSelector/affinity with a NodePool's requirements (or widen them), or add a NodePool that offers them"
	case containsAny(c, "exceed limits", "exceeds limit", "limits exceeded"):
		return "the NodePool reached its spec.limits", "raise the NodePool's spec.limits or free capacity in it"
	case containsAny(c, "no instance type", "instance types"):
		return "no instance type the NodePool allows fits the pod's requests and requirements",
			"lower the requests, or allow larger/other instance types (families, sizes, architectures, capacity types) in the NodePool"
	case containsAny(c, "topology"):
		return "the pod's topology constraints cannot be met by nodes of the NodePool", "allow the NodePool the zones the constraint needs, or relax the constraint"
	case containsAny(c, "volume"):
		return "the pod's volumes pin it where the NodePool cannot launch", "check the volumes' zones against the NodePool's zone requirement"
	}
	return "refused", "read the clause and the NodePool's requirements"
}

// launchFindings explains NodeClaims that fail to launch, register or
// initialize. Karpenter marks Launched=False (reason LaunchFailed) with the
// cloud provider's error (pkg/controllers/nodeclaim/lifecycle/launch.go);
// on AWS a subnet without free addresses reports EC2's
// InsufficientFreeAddressesInSubnet there.
func launchFindings(claims []NodeClaim) []Finding {
	var out []Finding
	for _, nc := range claims {
		if c, ok := condition(nc.Conditions, "Launched"); ok && c.Status == "False" {
			f := Finding{Cause: "NodeClaim " + nc.Name + " fails to launch", Evidence: []string{fmt.Sprintf("NodeClaim %s Launched=False %s: %s", nc.Name, c.Reason, c.Message)},
				Fix: "read the cloud provider's error; fix the NodeClass (subnets, security groups, AMI, IAM) or allow other instance types", Source: eventlog.Karpenter, Blocking: true}
			// Karpenter words every fleet error "insufficient capacity";
			// the subnet's own code is the more specific cause.
			if containsAny(c.Message, "InsufficientFreeAddressesInSubnet", "no free IP", "free addresses") {
				f.Cause = "the subnets of NodeClaim " + nc.Name + " have no free IP addresses"
				f.Fix = "free addresses or add subnets (larger CIDRs, secondary CIDR/custom networking, prefix delegation) and select them in the NodeClass"
			} else if containsAny(c.Message, "InsufficientInstanceCapacity", "insufficient capacity") {
				f.Cause = "the cloud has no capacity for NodeClaim " + nc.Name + "'s instance types"
				f.Fix = "allow more instance types, zones or capacity types (on-demand as well as spot) in the NodePool"
			}
			out = append(out, f)
			continue
		}
		for _, t := range []string{"Registered", "Initialized"} {
			if c, ok := condition(nc.Conditions, t); ok && c.Status == "False" {
				out = append(out, Finding{Cause: fmt.Sprintf("NodeClaim %s launched but is not %s", nc.Name, strings.ToLower(t)),
					Evidence: []string{fmt.Sprintf("NodeClaim %s %s=False %s: %s", nc.Name, t, c.Reason, c.Message)},
					Fix:      "the instance does not join or finish starting: check its kubelet (user data, bootstrap, IAM), and the startup taints' owners (CNI, CSI agents)",
					Source:   eventlog.Karpenter, Blocking: true})
				break
			}
		}
	}
	return out
}
