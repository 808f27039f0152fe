package accel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestExpectedPrecedence(t *testing.T) {
	table := map[string]int{"p5.48xlarge": 8}
	labels := map[string]string{InstanceTypeLabel: "p5.48xlarge", "example.com/gpus": "4"}
	cases := []struct {
		name   string
		o      ExpectOptions
		labels map[string]string
		want   Expectation
		ok     bool
		err    bool
	}{
		{"config wins", ExpectOptions{Count: 2, Label: "example.com/gpus", Table: table}, labels, Expectation{2, "the agent config"}, true, false},
		{"label before table", ExpectOptions{Label: "example.com/gpus", Table: table}, labels, Expectation{4, "node label example.com/gpus"}, true, false},
		{"table", ExpectOptions{Label: "example.com/absent", Table: table}, labels, Expectation{8, "instance type p5.48xlarge"}, true, false},
		{"unknown instance type", ExpectOptions{Table: table}, map[string]string{InstanceTypeLabel: "m7i.large"}, Expectation{}, false, false},
		{"no labels", ExpectOptions{Table: table}, nil, Expectation{}, false, false},
		{"bad label value", ExpectOptions{Label: "example.com/gpus"}, map[string]string{"example.com/gpus": "eight"}, Expectation{}, false, true},
		{"zero label value", ExpectOptions{Label: "example.com/gpus"}, map[string]string{"example.com/gpus": "0"}, Expectation{}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Expected(tc.o, tc.labels)
			if (err != nil) != tc.err || ok != tc.ok || got != tc.want {
				t.Fatalf("Expected = %+v, %v, %v; want %+v, %v, err %v", got, ok, err, tc.want, tc.ok, tc.err)
			}
		})
	}
}

func TestResolveExpectedSkipsLabelsWhenConfigured(t *testing.T) {
	calls := 0
	labels := func(context.Context) (map[string]string, error) { calls++; return nil, errors.New("api down") }
	if e, ok, err := ResolveExpected(context.Background(), ExpectOptions{Count: 8}, labels); err != nil || !ok || e.Count != 8 || calls != 0 {
		t.Fatalf("configured count: %+v %v %v (label reads %d)", e, ok, err, calls)
	}
	if _, _, err := ResolveExpected(context.Background(), ExpectOptions{}, labels); err == nil {
		t.Fatal("a label read error must be reported, not taken as 'unknown'")
	}
}

func TestDeviceNodes(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia-nvswitch0", "nvidia01", "nvidia"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DeviceNodes(dir, "nvidia")
	if err != nil || !slices.Equal(got, []int{0, 2, 10}) {
		t.Fatalf("DeviceNodes = %v, %v", got, err)
	}
	if got, err := DeviceNodes(filepath.Join(dir, "missing"), "nvidia"); err != nil || got != nil {
		t.Fatalf("missing dir: %v, %v", got, err)
	}
}

func FuzzDeviceNumber(f *testing.F) {
	for _, s := range []string{"nvidia0", "nvidia12", "nvidia-uvm", "nvidia01", "nvidia999999", "nvidia+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, ok := DeviceNumber(name, "nvidia")
		if ok && (n < 0 || n > 999999) {
			t.Fatalf("DeviceNumber(%q) = %d", name, n)
		}
	})
}
