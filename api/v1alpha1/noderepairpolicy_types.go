package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NodeRepairPolicy overrides, for the nodes it selects, when nodemend-controller
// considers a node broken and what it does about it. Without any
// NodeRepairPolicy the built-in defaults apply (docs/repair.md): Ready
// False/Unknown, KernelReady, ContainerRuntimeReady, NetworkingReady and
// StorageReady False for 30 minutes, AcceleratedHardwareReady False for 10
// minutes; at most 20% of a pool unhealthy; evict for up to 10 minutes, then
// delete; then the default ladder: Replace where an engine (Karpenter,
// Cluster API) owns the node, otherwise the rungs the vendor's catalogue
// names for the fault's reason, ending in Quarantine (Ladder below); a
// cloud's scheduled events are not acted on (ScheduledEvents below).
//
// When several policies select a node, the one with the highest weight wins
// (ties: the alphabetically first name); the fields a policy leaves empty take
// the defaults, not the values of another policy.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nrp,categories=nodemend
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Ladder",type=string,JSONPath=`.spec.ladder[*].action`,priority=1
// +kubebuilder:printcolumn:name="MaxUnhealthy",type=string,JSONPath=`.spec.maxUnhealthy`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeRepairPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeRepairPolicySpec `json:"spec"`
}

// NodeRepairPolicyList is a list of NodeRepairPolicies.
//
// +kubebuilder:object:root=true
type NodeRepairPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRepairPolicy `json:"items"`
}

// NodeRepairPolicySpec selects nodes and says how they are repaired.
//
// +kubebuilder:validation:XValidation:rule="!has(self.action) || !has(self.ladder)",message="set action or ladder, not both (action Replace is the ladder [Replace])"
type NodeRepairPolicySpec struct {
	// NodeSelector selects the nodes this policy applies to, by node labels
	// (for example karpenter.sh/nodepool: gpu). Empty or absent selects every
	// node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Weight orders policies that select the same node: the highest weight
	// applies. Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight,omitempty"`

	// Rules say which node conditions make a node unhealthy, and for how long
	// that is tolerated before the node is repaired. Empty or absent: the
	// default rules. The kubelet's DiskPressure, MemoryPressure and
	// PIDPressure are refused: they are relieved by the kubelet evicting pods,
	// and replacing the node would not help.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Rules []RepairRule `json:"rules,omitempty"`

	// MaxUnhealthy is how many nodes of a pool (and of a topology zone) may be
	// unhealthy at once while repairs go on: a count ("2") or a percentage of
	// the pool's nodes ("20%", rounded up as PodDisruptionBudgets round).
	// When more nodes than that are unhealthy, nothing in the pool is
	// repaired: so many failures at once are more likely a false alarm or an
	// outage than broken machines. Default "20%".
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnhealthy must be a count >= 0 or a percentage from 0% to 100%"
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`

	// Drain says how pods leave a node under repair.
	// +optional
	Drain *DrainPolicy `json:"drain,omitempty"`

	// Action is Replace (taint, drain, hand the node to its engine for
	// replacement) or None (count the node as unhealthy, log, never touch
	// it). Absent: the default ladder (docs/repair.md, The ladder). A
	// policy sets action or ladder, not both: action Replace is the ladder
	// of the one rung Replace.
	// +optional
	Action RepairAction `json:"action,omitempty"`

	// Ladder is what is tried, rung by rung, once the toleration has
	// passed and the node is tainted and drained: each rung's attempts in
	// turn, then the next rung, while the fault stays or comes back within
	// the rung's window. Replace and Quarantine end a ladder; a ladder
	// that ends in neither ends in Quarantine. Absent: the default ladder
	// — Replace where an engine (Karpenter, Cluster API) owns the node;
	// for other nodes it starts at the remedy the vendor's catalogue
	// names for the fault's reason (the reason registry's remedy; docs/
	// accelerators.md lists them): ResetAccelerator, Reboot, Quarantine
	// for a GPU reset; Quarantine alone for hardware only a person can
	// fix, where a reset or reboot would only bring a broken node back to
	// work for a while; Reboot, Quarantine for any other reason.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.action == a.action))",message="each action appears at most once in a ladder"
	// +kubebuilder:validation:XValidation:rule="self.filter(r, r.action == 'Replace' || r.action == 'Quarantine').size() == 0 || (self.filter(r, r.action == 'Replace' || r.action == 'Quarantine').size() == 1 && (self[size(self)-1].action == 'Replace' || self[size(self)-1].action == 'Quarantine'))",message="Replace or Quarantine may only be the last rung"
	Ladder []LadderRung `json:"ladder,omitempty"`

	// Quarantine says when a quarantined node returns to service by
	// itself.
	// +optional
	Quarantine *QuarantinePolicy `json:"quarantine,omitempty"`

	// ControlPlane says whether the selected nodes are repaired when they
	// are control-plane nodes: they carry the control-plane role label, or
	// run an etcd member or a kube-apiserver as a static pod. Skip (the
	// default) leaves them alone, with a NodeRepairBlocked event saying
	// why: on a self-managed cluster, taking such a node down can cost the
	// API or etcd's quorum. Repair repairs them as Cluster API's
	// KubeadmControlPlane remediates: one at a time cluster-wide, never the
	// last Ready one, and an etcd member only while the other members keep
	// quorum (docs/repair.md, Control-plane nodes).
	// +optional
	ControlPlane ControlPlaneMode `json:"controlPlane,omitempty"`

	// ScheduledEvents says what is done, ahead of time, about a node
	// whose cloud has scheduled an event for it (a reboot, retirement,
	// stop or maintenance: ScheduledMaintenance; a spot instance being
	// reclaimed: SpotInterruption), as the node's own agent reports it.
	// Absent: nothing (action Ignore).
	// +optional
	ScheduledEvents *ScheduledEventsPolicy `json:"scheduledEvents,omitempty"`
}

// ScheduledEventsPolicy says what nodemend-controller does about a cloud's
// scheduled event.
type ScheduledEventsPolicy struct {
	// Action is Ignore (the default: the event is reported, nothing more)
	// or Drain: the node is cordoned and its pods evicted (honouring
	// PodDisruptionBudgets, never deleted) before the event takes it
	// down, through the same gates as a repair (the pool's maxUnhealthy,
	// the pause switch, the veto, control-plane nodes skipped unless
	// controlPlane is Repair). The node is never tainted for repair,
	// rebooted or deleted for it; the cordon is lifted once the agent no
	// longer reports the event (docs/repair.md, Scheduled events).
	// +optional
	Action ScheduledEventAction `json:"action,omitempty"`
}

// ScheduledEventAction is what is done about a cloud's scheduled event.
//
// +kubebuilder:validation:Enum=Ignore;Drain
type ScheduledEventAction string

const (
	// ScheduledEventIgnore reports the event and does nothing (default).
	ScheduledEventIgnore ScheduledEventAction = "Ignore"
	// ScheduledEventDrain cordons and drains the node ahead of the event.
	ScheduledEventDrain ScheduledEventAction = "Drain"
)

// ControlPlaneMode says whether control-plane nodes are repaired.
//
// +kubebuilder:validation:Enum=Skip;Repair
type ControlPlaneMode string

const (
	// ControlPlaneSkip: control-plane nodes are not repaired (default).
	ControlPlaneSkip ControlPlaneMode = "Skip"
	// ControlPlaneRepair: control-plane nodes are repaired, one at a time,
	// never the last Ready one, etcd members only while quorum holds.
	ControlPlaneRepair ControlPlaneMode = "Repair"
)

// LadderRung is one rung of a ladder.
type LadderRung struct {
	// Action is ResetAccelerator (the node's agent resets the faulty GPUs
	// when no process holds them), Reboot (the node's agent reboots its
	// host; verified by the Node's bootID changing), Replace (the node's
	// engine replaces it, as action Replace does) or Quarantine (cordon and
	// taint the node for a person; it stays counted as unhealthy until
	// released).
	// +required
	Action LadderAction `json:"action"`

	// Attempts is how often the rung is tried before the next one. Default
	// 1; Replace and Quarantine are done once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Attempts int32 `json:"attempts,omitempty"`

	// Timeout bounds one attempt: from the order to the node verified (a
	// new bootID, the accelerator reset) and the triggering condition
	// healthy. An attempt that has not got there by then failed. Default
	// 15m for Reboot, 5m for ResetAccelerator; between 1m and 2h.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('2h')",message="timeout must be between 1m and 2h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Window is how long, after an attempt returned the node to service,
	// the same condition coming back counts as the attempt having failed:
	// the ladder goes on with the next attempt or rung instead of starting
	// over. Default 1h; at most 7 days.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="window must be between 0s and 168h"
	Window *metav1.Duration `json:"window,omitempty"`
}

// QuarantinePolicy says how a quarantined node returns to service.
type QuarantinePolicy struct {
	// HealthyFor: a quarantined node whose every rule is healthy for this
	// long is released by itself. 0 leaves the release to a person
	// (kubectl mend release NODE). Default 24h.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="healthyFor must not be negative"
	HealthyFor *metav1.Duration `json:"healthyFor,omitempty"`
}

// LadderAction is what one rung does.
// +kubebuilder:validation:Enum=ResetAccelerator;Reboot;Replace;Quarantine
type LadderAction string

const (
	// LadderResetAccelerator resets the node's faulty GPUs.
	LadderResetAccelerator LadderAction = "ResetAccelerator"
	// LadderReboot reboots the node.
	LadderReboot LadderAction = "Reboot"
	// LadderReplace hands the node to its engine.
	LadderReplace LadderAction = "Replace"
	// LadderQuarantine cordons and taints the node for a person.
	LadderQuarantine LadderAction = "Quarantine"
)

// Valid reports whether a is one of the ladder's actions. The rung table
// (pkg/rungs, which imports this package) is the list; its test keeps this
// switch, the enum above and the CRD's rules equal to it.
func (a LadderAction) Valid() bool {
	switch a {
	case LadderResetAccelerator, LadderReboot, LadderReplace, LadderQuarantine:
		return true
	}
	return false
}

// RepairRule makes a node unhealthy when its condition conditionType has the
// status status (and, if reasons is set, one of those reasons), and makes it
// repairable once that has lasted for toleration.
//
// +kubebuilder:validation:XValidation:rule="duration(self.toleration) >= duration('0s')",message="toleration must not be negative"
type RepairRule struct {
	// ConditionType is a node condition type, for example KernelReady or
	// Ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:XValidation:rule="!(self in ['DiskPressure', 'MemoryPressure', 'PIDPressure'])",message="DiskPressure, MemoryPressure and PIDPressure are never repair triggers: the kubelet relieves them by evicting pods, and replacing the node would not help"
	ConditionType string `json:"conditionType"`

	// Status is the condition status that is unhealthy.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status corev1.ConditionStatus `json:"status"`

	// Toleration is how long the condition may stay unhealthy before the node
	// is repaired, counted from the condition's lastTransitionTime (or from
	// when the controller first saw it unhealthy, if that is earlier), for
	// example "30m".
	// +required
	Toleration metav1.Duration `json:"toleration"`

	// Reasons, when set, limit the rule to conditions with one of these
	// reasons (for example NvidiaXIDError). Absent: any reason.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	Reasons []string `json:"reasons,omitempty"`
}

// DrainPolicy says how pods are moved off a node under repair.
type DrainPolicy struct {
	// Mode is Evict (the Eviction API, which honours PodDisruptionBudgets,
	// until the deadline; then the pods still there are deleted), Delete
	// (delete the pods at once, ignoring PodDisruptionBudgets) or Skip (no
	// drain by nodemend: the backend drains, as Karpenter and Cluster API
	// do when they remove a node). DaemonSet and mirror pods always stay.
	// Default Evict.
	// +optional
	Mode DrainMode `json:"mode,omitempty"`

	// Deadline bounds the Evict mode, counted from the start of the repair;
	// after it the remaining pods are deleted. Default 10m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="deadline must not be negative"
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// MaxConcurrent bounds how many of this policy's nodes are drained at
	// once. Every due node is tainted at once (the pool's maxUnhealthy
	// bounds how many); past this bound the tainted nodes wait their turn
	// in the order their repairs started. Unset: only the controller's
	// --max-concurrent-drains bounds them.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`
}

// RepairAction is what happens to a node once its toleration has passed.
// +kubebuilder:validation:Enum=Replace;None
type RepairAction string

const (
	// ActionReplace taints, drains and hands the node to its backend.
	ActionReplace RepairAction = "Replace"
	// ActionNone only counts and reports the node.
	ActionNone RepairAction = "None"
)

// DrainMode is how pods leave a node under repair.
// +kubebuilder:validation:Enum=Evict;Delete;Skip
type DrainMode string

const (
	// DrainEvict evicts (honouring PodDisruptionBudgets) until the deadline,
	// then deletes.
	DrainEvict DrainMode = "Evict"
	// DrainDelete deletes pods at once.
	DrainDelete DrainMode = "Delete"
	// DrainSkip leaves draining to the backend.
	DrainSkip DrainMode = "Skip"
)
