package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodemend.dev/nodemend/deploy/deploytest"
)

// containerArgs returns the args of the first container of a workload in
// the rendered plain manifests (the chart with its default values).
func containerArgs(t *testing.T, kind, name string) []string {
	t.Helper()
	data, err := os.ReadFile(deploytest.ManifestsFile())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploytest.Objects(data)
	if err != nil {
		t.Fatal(err)
	}
	o := deploytest.Find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s in %s", kind, name, deploytest.ManifestsFile())
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("%s %s has no containers", kind, name)
	}
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

// The chart's default Deployment runs the controller with the binary's own
// defaults: every flag it passes parses, and equals the flag's default.
func TestChartDefaultsAreTheBinaryDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	args := containerArgs(t, "Deployment", "nodemend-controller")
	fl := newCommand().Flags()
	if err := fl.Parse(args); err != nil {
		t.Fatalf("the chart's args %v do not parse: %v", args, err)
	}
	set := 0
	fl.Visit(func(f *pflag.Flag) {
		set++
		if got := f.Value.String(); got != f.DefValue {
			t.Errorf("chart sets --%s=%s, the binary's default is %q", f.Name, got, f.DefValue)
		}
	})
	if set < 10 {
		t.Errorf("the chart sets only %d flags; it spells out the controller's settings", set)
	}
}
