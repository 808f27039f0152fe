package sim

import (
	"encoding/json"
	"testing"
)

// The instance-types file offers each type the simulation uses on demand
// in exactly the zones asked for, in the kwok provider's format (its
// offerings' requirements under "Requirements").
func TestInstanceTypesOfferOnlyTheZonesAsked(t *testing.T) {
	out, err := instanceTypes([]string{"z1", "z2"})
	if err != nil {
		t.Fatal(err)
	}
	var types []struct {
		Name      string `json:"name"`
		Offerings []struct {
			Requirements []struct {
				Key    string   `json:"key"`
				Values []string `json:"values"`
			}
		} `json:"offerings"`
		Resources map[string]string `json:"resources"`
	}
	if err := json.Unmarshal(out, &types); err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, it := range types {
		if it.Resources["cpu"] == "" || it.Resources["pods"] == "" {
			t.Errorf("%s: resources %v", it.Name, it.Resources)
		}
		for _, o := range it.Offerings {
			for _, r := range o.Requirements {
				switch r.Key {
				case "topology.kubernetes.io/zone":
					seen[it.Name] = append(seen[it.Name], r.Values...)
				case "karpenter.sh/capacity-type":
					if len(r.Values) != 1 || r.Values[0] != "on-demand" {
						t.Errorf("%s: capacity types %v", it.Name, r.Values)
					}
				}
			}
		}
	}
	for _, name := range []string{"c-1x-amd64-linux", "c-4x-amd64-linux"} {
		if z := seen[name]; len(z) != 2 || z[0] != "z1" || z[1] != "z2" {
			t.Errorf("%s offered in %v, want [z1 z2]", name, z)
		}
	}
}
