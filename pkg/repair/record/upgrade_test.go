package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"nodemend.dev/nodemend/pkg/repair/record/legacy"
)

// A node as the previous release left it, in every phase, is read into
// the record; the write of that record (the controller's first) removes
// every old key and changes nothing else: not the other annotations, not
// the person's acts, not the taints or the cordon.
func TestTheFirstWriteMigratesEveryPhase(t *testing.T) {
	files, err := filepath.Glob("legacy/testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			old := &corev1.Node{}
			if err := json.Unmarshal(b, old); err != nil {
				t.Fatal(err)
			}
			st, err := Read(old)
			if err != nil || !st.Legacy {
				t.Fatalf("Read = legacy %v, %v", st.Legacy, err)
			}
			n := Apply(old, st.Record, st.Record)
			for k := range n.Annotations {
				if strings.HasPrefix(k, "nodemend.dev/") && k != StateAnnotation && k != VetoAnnotation && k != ReleaseAnnotation {
					t.Errorf("old key %s kept", k)
				}
			}
			for k, v := range old.Annotations {
				if !strings.HasPrefix(k, "nodemend.dev/") || k == VetoAnnotation || k == ReleaseAnnotation {
					if n.Annotations[k] != v {
						t.Errorf("annotation %s changed: %q → %q", k, v, n.Annotations[k])
					}
				}
			}
			if !equality.Semantic.DeepEqual(n.Spec, old.Spec) {
				t.Errorf("spec changed:\n%+v\n%+v", old.Spec, n.Spec)
			}
			again, err := Read(n)
			if err != nil || again.Legacy || !equality.Semantic.DeepEqual(again.Record, st.Record) {
				t.Errorf("read after the write: legacy %v, %v\n%+v\nwant\n%+v", again.Legacy, err, again.Record, st.Record)
			}
			if InRepair(n) != legacy.InRepair(old.Annotations) {
				t.Errorf("in repair %v before, %v after", legacy.InRepair(old.Annotations), InRepair(n))
			}
		})
	}
}
