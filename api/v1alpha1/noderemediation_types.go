package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeRemediation orders the nodemend-agent on one node to do one host
// action to its own machine: reboot it, or reset its accelerators.
// nodemend-controller creates one per attempt of a ladder rung, after it has
// tainted and drained the node (docs/repair.md, The ladder); the agent on
// spec.nodeName watches only its own objects (a server-side field selector
// on spec.nodeName), and admission lets it write only their status.
//
// The spec cannot change. An agent acts on an order at most once, and never
// after the order's deadline (metadata.creationTimestamp, which the API
// server sets, plus spec.activeDeadlineSeconds, judged on the agent's clock
// with its configured skew bound), never when the node has booted since the
// order was made (spec.bootID), and only after a fresh read and a
// status write that the API server accepted (status.phase Accepted): an
// agent that lost the API acts on nothing it saw before.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nrem,categories=nodemend
// +kubebuilder:subresource:status
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeRemediationSpec   `json:"spec"`
	Status NodeRemediationStatus `json:"status,omitempty"`
}

// NodeRemediationList is a list of NodeRemediations.
//
// +kubebuilder:object:root=true
type NodeRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRemediation `json:"items"`
}

// NodeRemediationSpec is the order. It is immutable: an order that could be
// rewritten after the agent accepted it would not be the order it accepted.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a NodeRemediation's spec is immutable"
// +kubebuilder:validation:XValidation:rule="self.action == 'ResetAccelerator' || !has(self.devices)",message="devices apply to ResetAccelerator only"
type NodeRemediationSpec struct {
	// NodeName is the Node whose agent carries out the order.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	NodeName string `json:"nodeName"`

	// Action is Reboot (the agent reboots its host through the mechanism
	// its operator configured) or ResetAccelerator (the agent resets the
	// named GPUs with the driver's tool, when no process holds them).
	//
	// +required
	Action HostAction `json:"action"`

	// BootID is the node's status.nodeInfo.bootID when the order was made.
	// An agent whose host runs another boot refuses the order: the node has
	// rebooted since, and the order is about a boot that is over.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`

	// Devices are the PCI bus IDs of the accelerators to reset
	// (ResetAccelerator), in the driver's form ("0000:3b:00.0"). Absent:
	// the accelerators whose fault triggered the repair, as the agent
	// knows them.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	Devices []string `json:"devices,omitempty"`

	// Reason is the node condition that made the controller order this
	// ("AcceleratedHardwareReady=False/NvidiaXID48Error"), for people and
	// for the agent to find the faulty accelerators.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// Trigger is the same condition, typed: the repair record's trigger.
	// The agent and admission read it; Reason says it for people.
	//
	// +optional
	Trigger *RepairTrigger `json:"trigger,omitempty"`

	// ActiveDeadlineSeconds is how long after its creation the order may
	// be started. An order found later is refused, never carried out.
	//
	// +required
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	ActiveDeadlineSeconds int64 `json:"activeDeadlineSeconds"`
}

// HostAction is what a NodeRemediation orders.
// +kubebuilder:validation:Enum=Reboot;ResetAccelerator
type HostAction string

const (
	// HostReboot reboots the node's machine.
	HostReboot HostAction = "Reboot"
	// HostResetAccelerator resets GPUs.
	HostResetAccelerator HostAction = "ResetAccelerator"
)

// NodeRemediationStatus is what the agent did.
type NodeRemediationStatus struct {
	// Phase: empty (not seen yet), Accepted (the agent confirmed the order
	// with the API server and is carrying it out; for a reboot, the last
	// word of the old boot), Succeeded, Failed (tried and did not work) or
	// Refused (not tried: past its deadline, another boot, mechanism off,
	// GPU busy).
	//
	// +optional
	Phase RemediationPhase `json:"phase,omitempty"`

	// BootID is the host's boot ID when the agent accepted the order.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`

	// Mechanism is how the agent carried it out: systemd, command, sysrq
	// (reboots), nvidia-smi (resets).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Mechanism string `json:"mechanism,omitempty"`

	// Devices are the accelerators the agent reset (the order's, plus those
	// the driver requires to be reset together with them).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=32
	Devices []string `json:"devices,omitempty"`

	// AcceptedTime and CompletedTime are on the agent's clock.
	//
	// +optional
	AcceptedTime *metav1.Time `json:"acceptedTime,omitempty"`
	// +optional
	CompletedTime *metav1.Time `json:"completedTime,omitempty"`

	// Message says what happened, for people.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
}

// RemediationPhase is the state of a NodeRemediation.
// +kubebuilder:validation:Enum="";Accepted;Succeeded;Failed;Refused
type RemediationPhase string

const (
	RemediationPending   RemediationPhase = ""
	RemediationAccepted  RemediationPhase = "Accepted"
	RemediationSucceeded RemediationPhase = "Succeeded"
	RemediationFailed    RemediationPhase = "Failed"
	RemediationRefused   RemediationPhase = "Refused"
)

// Finished reports whether the agent will do nothing more with the order.
func (p RemediationPhase) Finished() bool {
	return p == RemediationSucceeded || p == RemediationFailed || p == RemediationRefused
}

// DefaultMaxClockSkew is the bound on the difference between an agent's
// clock and the API server's that agents allow for by default when judging
// an order's deadline: an agent starts an order only while its clock is
// before the deadline by more than the bound. The controller gives every
// order a deadline longer than the bound (OrderActWindow on top), or no
// agent with the default bound could ever start it.
const DefaultMaxClockSkew = 30 * time.Second

// DefaultAgentHeartbeat is how often an agent rewrites its conditions when
// nothing changed (its exporter.heartbeat, by default): the controller
// takes an agent whose last heartbeat is much older for gone, so its floor
// for that bound (pkg/repair/ladder.MinAgentSilence) is built on it.
const DefaultAgentHeartbeat = 5 * time.Minute

// OrderActWindow is how long, at least, an agent with the default skew
// bound has to start an order after its creation.
const OrderActWindow = 20 * time.Second

// Deadline is when the order stops being valid, by the API server's clock.
func (o *NodeRemediation) Deadline() time.Time {
	return o.CreationTimestamp.Add(time.Duration(o.Spec.ActiveDeadlineSeconds) * time.Second)
}
