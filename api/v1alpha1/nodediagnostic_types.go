package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeDiagnostic asks the nodemend-agent on one node for a diagnostic bundle
// (logCapture), a packet capture (packetCapture) and/or a GPU diagnostic
// (gpuDiagnostic). The agent on
// spec.nodeName watches only its own objects (a server-side field selector on
// the selectable field spec.nodeName), does the work and reports progress in
// status. A capture whose status says Completed or Failed for the current
// generation is never run again, also not after an agent restart; editing
// the spec (a new generation) runs it again.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ndiag,categories=nodemend
// +kubebuilder:subresource:status
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Logs",type=string,JSONPath=`.status.logCapture.state`
// +kubebuilder:printcolumn:name="Packets",type=string,JSONPath=`.status.packetCapture.state`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.status.gpuDiagnostic.result`,priority=1
// +kubebuilder:printcolumn:name="File",type=string,JSONPath=`.status.logCapture.fileName`,priority=1
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.logCapture.sizeBytes`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeDiagnostic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeDiagnosticSpec   `json:"spec"`
	Status NodeDiagnosticStatus `json:"status,omitempty"`
}

// NodeDiagnosticList is a list of NodeDiagnostics.
//
// +kubebuilder:object:root=true
type NodeDiagnosticList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeDiagnostic `json:"items"`
}

// NodeDiagnosticSpec says which node to diagnose and what to capture.
//
// +kubebuilder:validation:XValidation:rule="has(self.logCapture) || has(self.packetCapture) || has(self.gpuDiagnostic)",message="at least one of logCapture, packetCapture and gpuDiagnostic is required"
type NodeDiagnosticSpec struct {
	// NodeName is the Node whose agent does the work. It cannot change: a
	// capture half done on one node cannot move to another.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// LogCapture collects a redacted .tar.gz bundle of logs and host state.
	// +optional
	LogCapture *LogCaptureSpec `json:"logCapture,omitempty"`

	// PacketCapture records packets on one interface into gzip-compressed
	// pcap files, kept on the node (destination node) or uploaded in chunks
	// as they close (uploadURLs).
	// +optional
	PacketCapture *PacketCaptureSpec `json:"packetCapture,omitempty"`

	// GPUDiagnostic runs NVIDIA DCGM's diagnostic (dcgmi diag) on the node's
	// GPUs, where DCGM runs. The diagnostic loads the GPUs and fails or
	// disturbs the work running on them: drain the node first. With a
	// logCapture in the same object, the bundle waits for the diagnostic and
	// contains its result.
	// +optional
	GPUDiagnostic *GPUDiagnosticSpec `json:"gpuDiagnostic,omitempty"`
}

// GPUDiagnosticSpec configures a GPU diagnostic.
type GPUDiagnosticSpec struct {
	// Level is DCGM's diagnostic level: 1 quick (seconds), 2 medium (about
	// two minutes), 3 long (about 15 minutes), 4 extended (an hour or more).
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4
	Level int32 `json:"level,omitempty"`

	// Timeout bounds the run, at most 8h; the host engine is asked to stop
	// it then too. Default: 10m for level 1, 30m for level 2, 2h for level
	// 3, 8h for level 4.
	//
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('8h')",message="timeout must be between 1s and 8h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DefaultGPUDiagnosticTimeout is the timeout of a level when the spec has
// none: several times the level's usual run time.
func DefaultGPUDiagnosticTimeout(level int32) time.Duration {
	switch level {
	case 2:
		return 30 * time.Minute
	case 3:
		return 2 * time.Hour
	case 4:
		return 8 * time.Hour
	}
	return 10 * time.Minute
}

// DestinationNode keeps a bundle or a packet capture on the node, under
// /var/log/nodemend/, where the kubelet's /logs/ endpoint serves it through
// the API server's node proxy.
const DestinationNode = "node"

// LogCaptureSpec configures a diagnostic bundle.
type LogCaptureSpec struct {
	// Destination is "node" (the bundle stays on the node for 10 minutes and is
	// downloaded through /api/v1/nodes/<node>/proxy/logs/nodemend/<file>) or an
	// https:// URL that accepts a PUT of the bundle, such as a pre-signed
	// object-store URL. Admission refuses other schemes, credentials in the
	// URL, "localhost" and literal loopback, link-local (169.254.169.254) and
	// unspecified addresses (a best effort on the text: CEL's ip() cannot be
	// used on a parsed host within the CRD cost budget). The agent checks the
	// address it actually connects to, every time, and refuses private ranges
	// too unless its configuration allows them.
	//
	// +optional
	// +kubebuilder:default=node
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self == 'node' || self.startsWith('https://')",message="destination must be \"node\" or an https:// URL"
	// +kubebuilder:validation:XValidation:rule="self == 'node' || (isURL(self) && size(url(self).getHostname()) > 0)",message="destination must be a valid URL with a host"
	// +kubebuilder:validation:XValidation:rule="self == 'node' || !self.matches('^https://[^/?#]*@')",message="destination must not contain user credentials"
	// +kubebuilder:validation:XValidation:rule="self == 'node' || !self.lowerAscii().matches('^https://(127[.]|0[.]0[.]0[.]0|169[.]254[.]|[[](::1?|fe[89ab][0-9a-f]:[^]]*|::ffff:[^]]*)[]]|localhost([:/?#]|$))')",message="destination must not be a loopback, link-local (such as 169.254.169.254) or unspecified address"
	Destination string `json:"destination,omitempty"`

	// Categories to collect; empty means all of them.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Categories []LogCategory `json:"categories,omitempty"`

	// Since limits time-based logs (journal, kernel ring buffer) to this long
	// before the capture starts. Default: 24h.
	//
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('720h')",message="since must be more than 0s and at most 720h"
	Since *metav1.Duration `json:"since,omitempty"`
}

// LogCategory names a group of collectors.
//
// +kubebuilder:validation:Enum=base;kernel;system;runtime;networking;storage;accelerators;nodemend
type LogCategory string

// The log categories.
const (
	// CategoryBase: OS release, kernel version and command line, uptime, node identity.
	CategoryBase LogCategory = "base"
	// CategoryKernel: the kernel ring buffer (kmsg), persisted kernel logs, modules.
	CategoryKernel LogCategory = "kernel"
	// CategorySystem: the journal of kubelet/containerd/agent, processes, sysctl, PSI, cgroup throttling.
	CategorySystem LogCategory = "system"
	// CategoryRuntime: CRI pods, containers and images; runtime and kubelet config.
	CategoryRuntime LogCategory = "runtime"
	// CategoryNetworking: links, addresses, routes, rules, neighbours, firewall rules, conntrack, DNS, sockets.
	CategoryNetworking LogCategory = "networking"
	// CategoryStorage: mounts, df, block devices, diskstats.
	CategoryStorage LogCategory = "storage"
	// CategoryAccelerators: nvidia-smi, AMD GPU and Neuron data where present.
	CategoryAccelerators LogCategory = "accelerators"
	// CategoryNodemend: the agent's current findings, effective config and metrics.
	CategoryNodemend LogCategory = "nodemend"
)

// AllLogCategories lists every category, in bundle order.
func AllLogCategories() []LogCategory {
	return []LogCategory{CategoryBase, CategoryKernel, CategorySystem, CategoryRuntime,
		CategoryNetworking, CategoryStorage, CategoryAccelerators, CategoryNodemend}
}

// PacketCaptureSpec configures a packet capture. Every file it produces is
// one gzip-compressed pcap stream (.pcap.gz), which Wireshark and tshark
// open as it is and tcpdump reads from zcat.
//
// +kubebuilder:validation:XValidation:rule="(has(self.destination) ? 1 : 0) + (has(self.uploadURLs) ? 1 : 0) + (has(self.upload) ? 1 : 0) == 1",message="packetCapture needs exactly one of destination: node, uploadURLs and upload"
// +kubebuilder:validation:XValidation:rule="!has(self.destination) || !has(self.chunkSize)",message="chunkSize applies to uploadURLs and upload only: a capture kept on the node is one file"
type PacketCaptureSpec struct {
	// Interface is a network interface name, or "any". The agent refuses a
	// name that is not a network interface of the node (so no D-Bus, USB or
	// netfilter-queue capture, which libpcap would also offer).
	//
	// +required
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9_.:@-]{0,14}$`
	Interface string `json:"interface"`

	// Filter is a BPF filter expression (pcap-filter syntax), passed to the
	// capture as one argument, never through a shell.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="filter must not start with '-'"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[ -~]*$')",message="filter must be printable ASCII without control characters"
	Filter string `json:"filter,omitempty"`

	// Duration of the capture, at most 1h.
	//
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="duration must be between 1s and 1h"
	Duration metav1.Duration `json:"duration"`

	// Destination "node" keeps the capture on the node as one .pcap.gz file
	// under /var/log/nodemend/ for 10 minutes, downloaded through
	// /api/v1/nodes/<node>/proxy/logs/nodemend/<file> like a log bundle
	// (kubectl mend capture does this). The file is capped by the agent's
	// capture disk budget (512 MiB by default); the capture stops early,
	// truncated, when it fills or when the node's disk is 90% full.
	// Exactly one of destination and uploadURLs is set.
	//
	// +optional
	// +kubebuilder:validation:Enum=node
	Destination string `json:"destination,omitempty"`

	// ChunkSize is the compressed size at which a chunk for uploadURLs
	// closes (at the next packet boundary); a chunk is uploaded as soon as
	// it closes and then deleted from the node. Default: 64Mi.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Gi')) <= 0",message="chunkSize must be between 1Mi and 1Gi"
	ChunkSize *resource.Quantity `json:"chunkSize,omitempty"`

	// UploadURLs receive the chunks by PUT, in order: chunk i goes to
	// uploadURLs[i] (pre-signed URLs are signed per object, so every chunk
	// needs its own). The capture stops early when every URL has been used.
	// Exactly one of destination and uploadURLs is set.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	UploadURLs []UploadURL `json:"uploadURLs,omitempty"`

	// Upload sends every chunk by POST to one S3 presigned POST policy (an
	// HTML form upload): the policy's fields with the chunk as the file,
	// and "${filename}" in the key replaced by the chunk's file name
	// (NODEDIAGNOSTIC-TIME-00000.pcap.gz, -00001, …), so that one policy
	// takes all the chunks. kubectl mend capture --s3 makes one; so does
	// the AWS SDK's PresignPostObject with a "starts-with $key" condition.
	// Exactly one of destination, uploadURLs and upload is set.
	//
	// +optional
	Upload *PostUpload `json:"upload,omitempty"`
}

// PostUpload is an S3 presigned POST policy: the bucket's URL and the form
// fields that carry the signed policy.
type PostUpload struct {
	// URL is the bucket's https:// URL the form is posted to.
	//
	// +required
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="upload url must be https://"
	// +kubebuilder:validation:XValidation:rule="isURL(self) && size(url(self).getHostname()) > 0",message="upload url must be a valid URL with a host"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^https://[^/?#]*@')",message="upload url must not contain user credentials"
	// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().matches('^https://(127[.]|0[.]0[.]0[.]0|169[.]254[.]|[[](::1?|fe[89ab][0-9a-f]:[^]]*|::ffff:[^]]*)[]]|localhost([:/?#]|$))')",message="upload url must not be a loopback, link-local (such as 169.254.169.254) or unspecified address"
	URL string `json:"url"`

	// Fields are the form fields of the policy, sent as they are but for
	// "${filename}" in key: key, policy, x-amz-algorithm (AWS4-HMAC-SHA256),
	// x-amz-credential, x-amz-date, x-amz-signature and, for temporary
	// credentials, x-amz-security-token; optionally acl,
	// success_action_status, Content-Type and x-amz-meta-*. The agent
	// checks them before capturing (names and sizes, the key's ${filename},
	// the policy's expiration and its conditions on the key and the size:
	// a CEL rule over every field would not fit the CRD's cost budget).
	//
	// +required
	// +kubebuilder:validation:MinProperties=6
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="has(self.key) && has(self.policy)",message="fields.key and fields.policy are required"
	Fields map[string]string `json:"fields"`
}

// UploadURL is an https:// URL that accepts a PUT.
//
// +kubebuilder:validation:MaxLength=4096
// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="upload URLs must be https://"
// +kubebuilder:validation:XValidation:rule="isURL(self) && size(url(self).getHostname()) > 0",message="upload URL must be a valid URL with a host"
// +kubebuilder:validation:XValidation:rule="!self.matches('^https://[^/?#]*@')",message="upload URL must not contain user credentials"
// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().matches('^https://(127[.]|0[.]0[.]0[.]0|169[.]254[.]|[[](::1?|fe[89ab][0-9a-f]:[^]]*|::ffff:[^]]*)[]]|localhost([:/?#]|$))')",message="upload URL must not be a loopback, link-local (such as 169.254.169.254) or unspecified address"
type UploadURL string

// NodeDiagnosticStatus is written by the agent on spec.nodeName only.
type NodeDiagnosticStatus struct {
	// ObservedGeneration is the spec generation the agent last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LogCapture is the state of the bundle.
	// +optional
	LogCapture *CaptureStatus `json:"logCapture,omitempty"`

	// PacketCapture is the state of the packet capture.
	// +optional
	PacketCapture *CaptureStatus `json:"packetCapture,omitempty"`

	// GPUDiagnostic is the state and result of the GPU diagnostic.
	// +optional
	GPUDiagnostic *GPUDiagnosticStatus `json:"gpuDiagnostic,omitempty"`

	// Conditions: Accepted (the agent on the node picked the object up),
	// LogsCollected, PacketsCaptured and GPUDiagnosed (True when done, False
	// with a reason when failed).
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CaptureState is the state of one capture.
//
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type CaptureState string

// Capture states. Completed and Failed are final for a generation.
const (
	CapturePending   CaptureState = "Pending"
	CaptureRunning   CaptureState = "Running"
	CaptureCompleted CaptureState = "Completed"
	CaptureFailed    CaptureState = "Failed"
)

// Final reports whether s ends a capture.
func (s CaptureState) Final() bool { return s == CaptureCompleted || s == CaptureFailed }

// CaptureStatus is the state of one capture.
type CaptureStatus struct {
	// State is Pending, Running, Completed or Failed.
	State CaptureState `json:"state"`

	// Generation is the spec generation this status belongs to.
	// +optional
	Generation int64 `json:"generation,omitempty"`

	// Attempts counts the starts of this capture for this generation; more
	// than one means the agent restarted while it ran.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// Message is a short human-readable progress or failure text, e.g. why an
	// upload URL was refused.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// ExpiryTime is when the agent deletes the file from the node
	// (destination node only).
	// +optional
	ExpiryTime *metav1.Time `json:"expiryTime,omitempty"`

	// FileName is the bundle's, the packet capture's or the GPU diagnostic's
	// name under /var/log/nodemend/ on the node (destination node only). It
	// becomes a path on the node's proxy and in the user's output directory,
	// so it is a plain file name: no path separators, no "..".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][A-Za-z0-9._-]*$') && !self.contains('..')",message="fileName must be a plain file name: letters, digits, '.', '_' and '-', no path separators, no '..'"
	FileName string `json:"fileName,omitempty"`

	// SizeBytes is the size of the bundle; for a packet capture, the
	// compressed bytes written so far (destination node) or uploaded.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// Packets and CapturedBytes count what a packet capture recorded so
	// far: packets, and their captured bytes before compression.
	// +optional
	Packets int64 `json:"packets,omitempty"`
	// +optional
	CapturedBytes int64 `json:"capturedBytes,omitempty"`

	// Truncated is set when the size cap cut the bundle or capture short.
	// +optional
	Truncated bool `json:"truncated,omitempty"`

	// CollectorsTotal and CollectorsDone show the progress of a bundle.
	// +optional
	CollectorsTotal int32 `json:"collectorsTotal,omitempty"`
	// +optional
	CollectorsDone int32 `json:"collectorsDone,omitempty"`

	// ChunksUploaded counts the packet-capture chunks uploaded so far.
	// +optional
	ChunksUploaded int32 `json:"chunksUploaded,omitempty"`

	// Errors lists the collectors that failed or timed out (the bundle's
	// manifest.json has every collector's details).
	// +optional
	// +listType=map
	// +listMapKey=collector
	// +kubebuilder:validation:MaxItems=64
	Errors []CollectorError `json:"errors,omitempty"`
}

// CollectorError is one collector's failure.
type CollectorError struct {
	// Collector is the collector's name, e.g. "system/journal-kubelet".
	// +kubebuilder:validation:MaxLength=128
	Collector string `json:"collector"`
	// Message says what went wrong.
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message"`
}

// GPUDiagnosticStatus is the state of a GPU diagnostic: a capture whose
// file (destination node, like a bundle) is dcgmi's JSON output, and the
// result DCGM gave.
type GPUDiagnosticStatus struct {
	CaptureStatus `json:",inline"`

	// Level is the level that ran.
	// +optional
	Level int32 `json:"level,omitempty"`

	// Result is Pass when every test result passed (or was skipped), Fail
	// when one did not. Empty until the diagnostic completed.
	// +optional
	Result GPUDiagnosticResult `json:"result,omitempty"`

	// FailedTests names the test results that did not pass, e.g.
	// "memory on GPU 0".
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	FailedTests []string `json:"failedTests,omitempty"`

	// DCGMVersion and DriverVersion are what DCGM reported.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DCGMVersion string `json:"dcgmVersion,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DriverVersion string `json:"driverVersion,omitempty"`
}

// GPUDiagnosticResult is a GPU diagnostic's overall result.
//
// +kubebuilder:validation:Enum=Pass;Fail
type GPUDiagnosticResult string

// GPU diagnostic results.
const (
	GPUDiagnosticPass GPUDiagnosticResult = "Pass"
	GPUDiagnosticFail GPUDiagnosticResult = "Fail"
)

// Condition types of a NodeDiagnostic.
const (
	ConditionAccepted        = "Accepted"
	ConditionLogsCollected   = "LogsCollected"
	ConditionPacketsCaptured = "PacketsCaptured"
	ConditionGPUDiagnosed    = "GPUDiagnosed"
)
