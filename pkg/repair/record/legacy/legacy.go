// Package legacy reads a repair as the previous release kept it on a Node
// — one nodemend.dev/ annotation per field, each with its own format — so
// that a controller of this release resumes a repair the previous one
// started. pkg/repair/record converts such a node to the RepairRecord on
// its first reconcile and removes these keys in the same write; nothing
// writes them any more. testdata/ holds the annotation sets the previous
// release wrote in each phase.
package legacy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// The previous release's annotations.
const (
	prefix = "nodemend.dev/"

	UnhealthySince = prefix + "unhealthy-since"          // {"Type":"RFC 3339",…}
	Phase          = prefix + "repair-phase"             // Draining|Terminating|Remediating|Quarantined
	Started        = prefix + "repair-started"           // RFC 3339
	Reason         = prefix + "repair-reason"            // "Type=Status/Reason"
	Policy         = prefix + "repair-policy"            // name
	Drained        = prefix + "repair-drained"           // RFC 3339
	Target         = prefix + "repair-target"            // JSON, the RepairTarget's fields
	Failed         = prefix + "repair-failed"            // RFC 3339
	Rung           = prefix + "repair-rung"              // JSON, the RungAttempt's fields (timeout a duration string)
	Ladder         = prefix + "repair-ladder"            // JSON, the LadderRecord's fields
	Quarantined    = prefix + "quarantined"              // RFC 3339
	HealthySince   = prefix + "quarantine-healthy-since" // RFC 3339
	Cordoned       = prefix + "cordoned"                 // "true"
)

// Keys are the previous release's controller-written annotations, every
// one of which the conversion removes.
func Keys() []string {
	return []string{UnhealthySince, Phase, Started, Reason, Policy, Drained, Target, Failed, Rung, Ladder,
		Quarantined, HealthySince, Cordoned}
}

// Present reports whether annotations hold any of Keys.
func Present(annotations map[string]string) bool {
	for _, k := range Keys() {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// InRepair reports whether the previous release's annotations say a repair
// runs, for counters that must not decode every node.
func InRepair(annotations map[string]string) bool { return annotations[Phase] != "" }

// Convert is the RepairRecord of node's previous-release annotations. A
// value that does not parse is an error, as it was for the previous
// release: the controller reports it and leaves the node alone.
func Convert(node *corev1.Node) (v1alpha1.RepairRecord, error) {
	a := node.Annotations
	r := v1alpha1.RepairRecord{Version: v1alpha1.RepairRecordVersion, Phase: v1alpha1.RepairPhase(a[Phase]), Policy: a[Policy]}
	var err error
	if v := a[UnhealthySince]; v != "" {
		var raw map[corev1.NodeConditionType]metav1.Time
		if err := json.Unmarshal([]byte(v), &raw); err != nil {
			return v1alpha1.RepairRecord{}, fmt.Errorf("%s %q: %w", UnhealthySince, v, err)
		}
		r.UnhealthySince = raw
	}
	for key, dst := range map[string]*metav1.Time{Started: &r.Started, Drained: &r.Drained, Failed: &r.Failed,
		Quarantined: &r.Quarantined, HealthySince: &r.HealthySince} {
		if *dst, err = parseTime(a, key); err != nil {
			return v1alpha1.RepairRecord{}, err
		}
	}
	if v, ok := a[Reason]; ok && v != "" {
		r.Trigger = parseReason(v)
	} else if r.InRepair() {
		// Written with the phase by every version; should it be missing,
		// the taint still names the condition.
		for _, t := range node.Spec.Taints {
			if t.Key == v1alpha1.RepairTaintKey && t.Value != "" {
				r.Trigger = &v1alpha1.RepairTrigger{Type: corev1.NodeConditionType(t.Value)}
			}
		}
	}
	// The JSON values were written from types whose field names the
	// record's kept.
	if r.Target, err = decode[v1alpha1.RepairTarget](a, Target); err != nil {
		return v1alpha1.RepairRecord{}, err
	}
	if r.Rung, err = decode[v1alpha1.RungAttempt](a, Rung); err != nil {
		return v1alpha1.RepairRecord{}, err
	}
	if r.Ladder, err = decode[v1alpha1.LadderRecord](a, Ladder); err != nil {
		return v1alpha1.RepairRecord{}, err
	}
	r.Cordoned = a[Cordoned] == "true"
	if err := r.Validate(); err != nil {
		return v1alpha1.RepairRecord{}, fmt.Errorf("the previous release's repair annotations: %w", err)
	}
	// Through the record's own codec, so that the record converted is the
	// record that will be read back (whole seconds, as it keeps times).
	return v1alpha1.DecodeRepairRecord(r.Encode())
}

func parseTime(a map[string]string, key string) (metav1.Time, error) {
	v := a[key]
	if v == "" {
		return metav1.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return metav1.Time{}, fmt.Errorf("%s: %w", key, err)
	}
	return metav1.NewTime(t.UTC()), nil
}

// parseReason reads "Type=Status/Reason", the one place it is still read.
func parseReason(s string) *v1alpha1.RepairTrigger {
	typ, rest, _ := strings.Cut(s, "=")
	status, reason, _ := strings.Cut(rest, "/")
	return &v1alpha1.RepairTrigger{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionStatus(status), Reason: reason}
}

func decode[T any](a map[string]string, key string) (*T, error) {
	v, ok := a[key]
	if !ok {
		return nil, nil
	}
	out := new(T)
	if err := json.Unmarshal([]byte(v), out); err != nil {
		return nil, fmt.Errorf("%s %q: %w", key, v, err)
	}
	return out, nil
}
