package deploytest

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/monitors"
)

// The agent config the chart renders by default is the binary's default,
// and spells out every key of it (so a changed binary default cannot hide
// behind an older value in the chart).
func TestChartAgentConfigIsTheBinaryDefault(t *testing.T) {
	objs, err := Objects(Must[[]byte](t)(os.ReadFile(ManifestsFile())))
	if err != nil {
		t.Fatal(err)
	}
	cm := Find(objs, "ConfigMap", "nodemend-agent-config")
	if cm == nil {
		t.Fatal("no agent ConfigMap in deploy/manifests")
	}
	text, _, _ := unstructured.NestedString(cm.Object, "data", "agent.yaml")
	got, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the chart's agent config does not parse: %v", err)
	}
	// Compared as JSON: pointers by value, an empty reasons map as absent.
	g, w := Must[[]byte](t)(json.Marshal(got)), Must[[]byte](t)(json.Marshal(config.Default()))
	if string(g) != string(w) {
		t.Errorf("chart agent config differs from config.Default():\n got %s\nwant %s", g, w)
	}
	var rendered map[string]any
	if err := yaml.Unmarshal([]byte(text), &rendered); err != nil {
		t.Fatal(err)
	}
	var def map[string]any
	if err := json.Unmarshal(Must[[]byte](t)(json.Marshal(config.Default())), &def); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range keyPaths("", rendered) {
		have[k] = true
	}
	for _, k := range keyPaths("", def) {
		if !have[k] {
			t.Errorf("the chart's agent config leaves %s to the binary; spell it out", k)
		}
	}
}

// keyPaths lists the dotted paths of the leaves of a decoded YAML/JSON map.
func keyPaths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		p := strings.TrimPrefix(prefix+"."+k, ".")
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, keyPaths(p, sub)...)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// values.schema.json describes exactly the agent config's fields: a field
// added to pkg/agent/config must be added to the schema (which refuses
// unknown keys), and a removed one removed.
func TestValuesSchemaCoversTheAgentConfig(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(Must[[]byte](t)(os.ReadFile(ChartDir()+"/values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	agentCfg := dig(schema, "properties", "agent", "properties", "config")
	got := schemaPaths("", agentCfg)
	want := typePaths("", reflect.TypeFor[config.Config]())
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("schema agent.config fields:\n%s\nconfig.Config fields:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

// schemaPaths lists the property paths of a schema object; a map's values
// (additionalProperties) appear as "*".
func schemaPaths(prefix string, s map[string]any) []string {
	var out []string
	if props, ok := s["properties"].(map[string]any); ok {
		for k, v := range props {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			sub := v.(map[string]any)
			if _, ok := sub["properties"]; ok {
				out = append(out, schemaPaths(p, sub)...)
			} else if ap, ok := sub["additionalProperties"].(map[string]any); ok {
				out = append(out, schemaPaths(p+".*", ap)...)
			} else {
				out = append(out, p)
			}
		}
	}
	return out
}

// typePaths lists the JSON field paths of a config struct type, the same
// way: structs are descended into (except Duration, a leaf), a map's values
// appear as "*".
func typePaths(prefix string, typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" {
			out = append(out, typePaths(prefix, ft)...)
			continue
		}
		p := strings.TrimPrefix(prefix+"."+name, ".")
		switch {
		case ft == reflect.TypeFor[detection.Duration]():
			out = append(out, p)
		case ft == reflect.TypeFor[config.Monitors]():
			for _, k := range monitors.Table() {
				out = append(out, typePaths(p+"."+k.Name, k.Section())...)
			}
		case ft.Kind() == reflect.Struct:
			out = append(out, typePaths(p, ft)...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, typePaths(p+".*", ft.Elem())...)
		default:
			out = append(out, p)
		}
	}
	return out
}
