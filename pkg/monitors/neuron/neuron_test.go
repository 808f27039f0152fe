package neuron

import (
	"context"
	"reflect"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/rules"
)

var t0 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// Lines carry the NEURON_HW_ERR tags that the AWS Neuron node problem
// detector matches (aws-neuron-sdk k8s-neuron-problem-detector-and-recovery
// config) and that the EKS node monitoring agent maps to these reasons.
func TestRules(t *testing.T) {
	m := New(detection.Env{}, Options{})
	matcher, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		line    string
		reason  string
		subject string
	}{
		{"neuron: nd3: NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR instance-id=i-0abc hbm-index=2", health.ReasonNeuronHBMUncorrectableError, "neuron3"},
		{"neuron0: NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR nc=1", health.ReasonNeuronSRAMUncorrectableError, "neuron0"},
		{"NEURON_HW_ERR=NC_UNCORRECTABLE_ERROR detected", health.ReasonNeuronNCUncorrectableError, ""},
		{"neuron: nd12: NEURON_HW_ERR=DMA_ERROR queue=4", health.ReasonNeuronDMAError, "neuron12"},
		{"neuron: nd1: NEURON_HW_ERR=DMA_ERRORS_CLEARED", "", ""},
		{"neuron: nd1: device initialized", "", ""},
	}
	for _, tc := range cases {
		var got []detection.Finding
		line := monitortest.Kernel(tc.line, t0)
		matcher.Match(line, func(mt logline.Match) { got = append(got, m.Interpret(mt)...) })
		monitortest.NoForgeryMatches(t, Rules(), []logline.Line{line})
		if tc.reason == "" {
			if got != nil {
				t.Errorf("%q: want no finding, got %+v", tc.line, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Reason != tc.reason || got[0].Subject != tc.subject || !got[0].Observed.Equal(t0) {
			t.Errorf("%q: got %+v", tc.line, got)
		}
		if r, _ := health.LookupReason(tc.reason); r.Severity != health.Fatal {
			t.Errorf("%s must be Fatal", tc.reason)
		}
	}
}

func TestAppliesAndDeviceCount(t *testing.T) {
	ctx := context.Background()
	if New(detection.Env{HostRoot: hostroot.New(t).Dir}, Options{}).Applies(ctx) {
		t.Fatal("no /dev/neuronN: does not apply")
	}
	root := hostroot.New(t).WithNeuronDevices(15)
	labels := func(context.Context) (map[string]string, error) {
		return map[string]string{accel.InstanceTypeLabel: "trn1.32xlarge"}, nil
	}
	m := New(detection.Env{HostRoot: root.Dir}, Options{NodeLabels: labels, Expect: accel.ExpectOptions{Table: accel.NeuronDevices()}})
	if !m.Applies(ctx) {
		t.Fatal("/dev/neuronN present")
	}
	fs, err := m.Checks()[0].Run(ctx)
	want := "15 Neuron devices present (/dev/neuronN), 16 expected (from instance type trn1.32xlarge)"
	if err != nil || len(fs) != 1 || fs[0].Reason != health.ReasonNeuronDeviceCountMismatch || fs[0].Message != want {
		t.Fatalf("findings %+v, %v", fs, err)
	}
	root.WithNeuronDevices(16)
	if fs, err := m.Checks()[0].Run(ctx); err != nil || fs != nil {
		t.Fatalf("all devices: %+v, %v", fs, err)
	}
	if msg, bad := evalDeviceCount(3, accel.Expectation{}, false); bad || !reflect.DeepEqual(msg, "") {
		t.Fatal("unknown expectation is never a mismatch")
	}
}
