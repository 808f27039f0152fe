package monitors

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors/amdgpu"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/networking"
	"nodemend.dev/nodemend/pkg/monitors/neuron"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/storage"
)

// The table and the reason registry list the same monitors, and each entry
// builds the monitor it is named after.
func TestTableIsTheRegistry(t *testing.T) {
	var registry, table []string
	for _, m := range health.Monitors() {
		registry = append(registry, m.Name)
	}
	noNVML := func(string) (nvidia.Driver, error) { return nil, context.Canceled }
	for _, k := range Table() {
		if slices.Contains(table, k.Name) {
			t.Errorf("%s is in the table twice", k.Name)
		}
		table = append(table, k.Name)
		m := k.New(detection.Env{HostRoot: t.TempDir()}, Deps{Hosts: Hosts{NVML: noNVML}}, k.Default())
		if m.Name() != k.Name {
			t.Errorf("table entry %s builds monitor %s", k.Name, m.Name())
		}
	}
	slices.Sort(registry)
	slices.Sort(table)
	if !slices.Equal(registry, table) {
		t.Errorf("registry monitors %v, table %v", registry, table)
	}
}

// Every default section is valid and is what an empty section decodes to.
func TestDefaultsAreValidAndFillEmptySections(t *testing.T) {
	for _, k := range Table() {
		def := k.Default()
		if errs := def.Validate("monitors." + k.Name); len(errs) > 0 {
			t.Errorf("%s: default section invalid: %v", k.Name, errs)
		}
		if !def.On() {
			t.Errorf("%s is off by default", k.Name)
		}
		got, err := k.Decode([]byte("{}"))
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		if !equalJSON(t, got, def) {
			t.Errorf("%s: {} decodes to %+v, want the default %+v", k.Name, got, def)
		}
		if _, err := k.Decode([]byte(`{"noSuchKey": 1}`)); err == nil {
			t.Errorf("%s: an unknown key is accepted", k.Name)
		}
		off, err := k.Decode([]byte(`{"enabled": false}`))
		if err != nil || off.On() {
			t.Errorf("%s: enabled: false gives %+v, %v", k.Name, off, err)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// A default is written once, in the monitor's DefaultConfig: a monitor built
// from empty options (as tests and the simulation build them) runs its checks
// at the periods of the default section, and the checks every section turns
// on have the periods its keys say.
func TestEmptyOptionsTakeTheDefaultSection(t *testing.T) {
	env := detection.Env{HostRoot: t.TempDir()}
	empty := map[string]detection.Monitor{
		"kernel":           kernel.New(env, kernel.Options{}),
		"containerRuntime": containerruntime.New(env, containerruntime.Options{}),
		"networking":       networking.New(env, networking.Options{}),
		"storage":          storage.New(env, storage.Options{}),
		"nvidia":           nvidia.New(env, nvidia.Options{}),
		"neuron":           neuron.New(env, neuron.Options{}),
		"amdgpu":           amdgpu.New(env, amdgpu.Options{}),
	}
	for _, k := range Table() {
		m, ok := empty[k.Name]
		if !ok {
			t.Errorf("%s: not in this test", k.Name)
			continue
		}
		want := periods(k.New(env, Deps{}, k.Default()).Checks())
		if got := periods(m.Checks()); !maps.Equal(got, want) {
			t.Errorf("%s: built from empty options, check periods %v; from the default section %v", k.Name, got, want)
		}
	}
}

func periods(cs []detection.Check) map[string]time.Duration {
	p := map[string]time.Duration{}
	for _, c := range cs {
		p[c.Name] = c.Period
	}
	return p
}
