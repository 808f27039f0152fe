package main

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodemend.dev/nodemend/deploy/deploytest"
)

// chartDeviations are the flags the chart's DaemonSet sets to other values
// than the binary's defaults, and why. Anything else it passes must equal
// the default.
var chartDeviations = map[string]string{
	"host-root":            "the host's / is mounted at /host in the pod",
	"config":               "the config file comes from the chart's ConfigMap (itself equal to the defaults)",
	"metrics-bind-address": "the pod runs in the host network: the node's own IP instead of loopback, on the default port",
	"reboot-mechanism":     "the binary reboots nothing unless told how; the chart asks the host's systemd (refused, with the reason, where PID 1 is not systemd)",
}

func agentArgs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(deploytest.ManifestsFile())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploytest.Objects(data)
	if err != nil {
		t.Fatal(err)
	}
	ds := deploytest.Find(objs, "DaemonSet", "nodemend-agent")
	if ds == nil {
		t.Fatal("no agent DaemonSet in deploy/manifests")
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

// The chart's default DaemonSet runs the agent with the binary's defaults,
// except for the documented deviations.
func TestChartDefaultsAreTheBinaryDefaults(t *testing.T) {
	args := agentArgs(t)
	fl := newCommand().Flags()
	if err := fl.Parse(args); err != nil {
		t.Fatalf("the chart's args %v do not parse: %v", args, err)
	}
	fl.Visit(func(f *pflag.Flag) {
		if _, ok := chartDeviations[f.Name]; ok {
			return
		}
		if got := f.Value.String(); got != f.DefValue {
			t.Errorf("chart sets --%s=%s, the binary's default is %q", f.Name, got, f.DefValue)
		}
	})
	for _, name := range []string{"kube-api-qps", "diagnostics", "remediation", "reboot-mechanism", "accelerator-reset", "max-clock-skew", "cloud-metadata"} {
		if !fl.Changed(name) {
			t.Errorf("the chart leaves --%s to the binary; spell it out (values: agent.*)", name)
		}
	}
	// The metrics address differs in its host only.
	_, defPort, _ := net.SplitHostPort(fl.Lookup("metrics-bind-address").DefValue)
	addr := fl.Lookup("metrics-bind-address").Value.String()
	if !strings.HasPrefix(addr, "$(NODE_IP):") || !strings.HasSuffix(addr, ":"+defPort) {
		t.Errorf("--metrics-bind-address=%s, want $(NODE_IP):%s", addr, defPort)
	}
}
