package cli

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// The test API server serves Cluster API's CRDs: the Machine resource the
// backends pool nodes by is found in its preferred version; a server
// without them has none.
func TestMachineGVR(t *testing.T) {
	gvr, ok := machineGVR(core.Discovery())
	if !ok || gvr.Group != "cluster.x-k8s.io" || gvr.Resource != "machines" || gvr.Version == "" {
		t.Fatalf("machineGVR = %v, %v; want Cluster API's machines", gvr, ok)
	}
	preferred := ""
	groups, err := core.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name == gvr.Group {
			preferred = g.PreferredVersion.Version
		}
	}
	if gvr.Version != preferred {
		t.Errorf("machineGVR version %s, want the preferred %s", gvr.Version, preferred)
	}

	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if gvr, ok := machineGVR(env.Client.Discovery()); ok || gvr != (schema.GroupVersionResource{}) {
		t.Errorf("without Cluster API: machineGVR = %v, %v", gvr, ok)
	}
}
