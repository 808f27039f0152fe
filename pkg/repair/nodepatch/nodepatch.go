// Package nodepatch encodes a repair's write to a Node as a JSON merge patch
// (RFC 7386) built from the fields a repair writes — annotations, labels,
// taints and the unschedulable flag — instead of diffing two whole nodes.
//
// Why: the generic way (controller-runtime's MergeFrom) marshals the old and
// the new Node to JSON, decodes both into maps and walks them; for a node
// with its status that is most of the CPU a repair decision costs the
// controller, and in a storm that CPU is taken from the API server on the
// same machine (docs/performance.md). The fields here are the only ones the
// repair's steps (pkg/repair/record) change; a change anywhere else is
// reported, and the caller diffs the whole object as before.
//
// The patch means the same as a strategic merge patch: none of its lists
// has a merge strategy (a strategic merge patch replaces taints whole, as a
// JSON merge patch does), no key can be a patch directive (annotation and
// label keys cannot start with "$"), and null removes a key in both. The
// API server applies a strategic merge patch to a node without encoding the
// whole node to JSON and decoding it back, so the controller sends it as
// one.
package nodepatch

import (
	"encoding/json"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Merge returns the JSON merge patch that turns old into updated. ok is
// false when the two differ outside the fields this package writes; the
// patch is then nil. With lock, the patch carries old's resourceVersion, so
// that the API server refuses it when the node changed since old was read.
func Merge(old, updated *corev1.Node, lock bool) (patch []byte, ok bool, err error) {
	if !onlyRepairFieldsDiffer(old, updated) {
		return nil, false, nil
	}
	var p mergePatch
	meta := metaPatch{
		Annotations: mapChanges(old.Annotations, updated.Annotations),
		Labels:      mapChanges(old.Labels, updated.Labels),
	}
	if lock {
		meta.ResourceVersion = old.ResourceVersion
	}
	if meta.Annotations != nil || meta.Labels != nil || meta.ResourceVersion != "" {
		p.Metadata = &meta
	}
	var spec specPatch
	if !sameTaints(old.Spec.Taints, updated.Spec.Taints) {
		if spec.Taints, err = listOrNull(updated.Spec.Taints); err != nil {
			return nil, false, err
		}
	}
	if old.Spec.Unschedulable != updated.Spec.Unschedulable {
		// false is the field's absence (omitempty), as in the diff of two
		// whole nodes.
		spec.Unschedulable = json.RawMessage(jsonNull)
		if updated.Spec.Unschedulable {
			spec.Unschedulable = json.RawMessage("true")
		}
	}
	if spec.Taints != nil || spec.Unschedulable != nil {
		p.Spec = &spec
	}
	patch, err = json.Marshal(p)
	return patch, err == nil, err
}

const jsonNull = "null"

type mergePatch struct {
	Metadata *metaPatch `json:"metadata,omitempty"`
	Spec     *specPatch `json:"spec,omitempty"`
}

type metaPatch struct {
	// A nil value is JSON null: the key is removed.
	Annotations     map[string]*string `json:"annotations,omitempty"`
	Labels          map[string]*string `json:"labels,omitempty"`
	ResourceVersion string             `json:"resourceVersion,omitempty"`
}

type specPatch struct {
	// Raw, so that a removal can be written as null despite omitempty.
	Taints        json.RawMessage `json:"taints,omitempty"`
	Unschedulable json.RawMessage `json:"unschedulable,omitempty"`
}

// onlyRepairFieldsDiffer compares the nodes with the written fields (and
// the resourceVersion, which the patch does not set) masked. The comparison
// is exact (reflect, not semantic equality, which costs three times as
// much): a value equal in meaning but not in form, such as a re-parsed
// Quantity, counts as a change and only sends the write the slower way.
func onlyRepairFieldsDiffer(old, updated *corev1.Node) bool {
	a, b := *old, *updated // shallow: only b's own fields are reassigned
	b.Annotations, b.Labels, b.ResourceVersion = a.Annotations, a.Labels, a.ResourceVersion
	b.Spec.Taints, b.Spec.Unschedulable = a.Spec.Taints, a.Spec.Unschedulable
	return reflect.DeepEqual(&a, &b)
}

// mapChanges is the merge patch of a string map: changed and new keys with
// their values, removed keys as null; nil when nothing changed.
func mapChanges(old, updated map[string]string) map[string]*string {
	var out map[string]*string
	set := func(k string, v *string) {
		if out == nil {
			out = map[string]*string{}
		}
		out[k] = v
	}
	for k, v := range updated {
		if ov, had := old[k]; !had || ov != v {
			set(k, &v)
		}
	}
	for k := range old {
		if _, kept := updated[k]; !kept {
			set(k, nil)
		}
	}
	return out
}

// sameTaints compares taint lists; nil and empty are the same list (both
// are the field's absence on the wire).
func sameTaints(a, b []corev1.Taint) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return equality.Semantic.DeepEqual(a, b)
}

// listOrNull is the merge patch of a list: the whole new list (a merge
// patch replaces lists), or null for an empty one.
func listOrNull(taints []corev1.Taint) (json.RawMessage, error) {
	if len(taints) == 0 {
		return json.RawMessage(jsonNull), nil
	}
	return json.Marshal(taints)
}
