package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	agentmetrics "nodemend.dev/nodemend/pkg/agent/metrics"
	repairmetrics "nodemend.dev/nodemend/pkg/repair/metrics"
)

// scraped are series Prometheus adds itself to every target.
var scraped = []string{"up"}

// exportedMetrics are the series names the binaries expose, gathered from
// their real collectors: the agent's registry and the controller's (the
// repair metrics on controller-runtime's registry), with every recording
// method called once so that vectors have a child, and histograms expanded
// to their _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, n := range scraped {
		names[n] = true
	}
	add := func(g prometheus.Gatherer) {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			n := mf.GetName()
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
			default:
				names[n] = true
			}
		}
	}
	agent := agentmetrics.NewAgent()
	callEveryMethod(t, agent, func() { add(agent.Registry) })

	reg := prometheus.NewRegistry()
	repair := repairmetrics.New(reg, oneOfEverything{})
	callEveryMethod(t, repair, func() { add(reg) })
	add(ctrlmetrics.Registry)
	return names
}

// callEveryMethod calls each exported method of v with arbitrary arguments
// (zero values, a second for durations), running after() after each call:
// a method may remove what another added.
func callEveryMethod(t *testing.T, v any, after func()) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m := rv.Method(i)
		args := make([]reflect.Value, m.Type().NumIn())
		for j := range args {
			in := m.Type().In(j)
			if in == reflect.TypeFor[time.Duration]() {
				args[j] = reflect.ValueOf(time.Second)
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		m.Call(args)
		after()
	}
}

// oneOfEverything is a fleet with an unhealthy node, a blocked pool and the
// pause on, so every fleet gauge has a series.
type oneOfEverything struct{}

func (oneOfEverything) Unhealthy() []repairmetrics.FleetNode {
	return []repairmetrics.FleetNode{{Pool: "p", Condition: "KernelReady"}}
}
func (oneOfEverything) Blocked() map[string]string  { return map[string]string{"p": "pool"} }
func (oneOfEverything) Paused() bool                { return true }
func (oneOfEverything) Quarantined() map[string]int { return map[string]int{"p": 1} }

func TestMetricNamesLexer(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket{job="x", le!="+Inf"}[5m])))`: {"a_bucket"},
		`count(up{job="nodemend-agent"} == 0) or vector(0)`:                               {"up"},
		`sum by (pool, gate) (b) / on (pool) group_left (zone) c offset 5m > 0.5`:         {"b", "c"},
		`absent(up{job="c"} == 1)`:                          {"up"},
		`rate(process_cpu_seconds_total[$__rate_interval])`: {"process_cpu_seconds_total"},
		`topk(10, sum by (node) (increase(d[1h])))`:         {"d"},
	} {
		if got := MetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("MetricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}

func chartFile(t *testing.T, name string) []byte {
	t.Helper()
	return Must[[]byte](t)(os.ReadFile(filepath.Join(ChartDir(), "files", name)))
}

// The alert rules parse, are complete, and use only exported metrics.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(chartFile(t, "prometheus-rules.yaml"), &file); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || alerts[r.Alert] {
				t.Errorf("group %s: missing or duplicate alert name %q", g.Name, r.Alert)
			}
			alerts[r.Alert] = true
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", r.Alert, err)
				}
			}
			names := MetricNames(r.Expr)
			if len(names) == 0 {
				t.Errorf("%s: no metric in %q", r.Alert, r.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("%s uses %s, which no nodemend binary exports", r.Alert, n)
				}
			}
		}
	}
	// The alerts: pool blocked, repairs failing, agent down, latency.
	for _, want := range []string{"NodemendRepairsBlockedBySafetyGate", "NodemendRepairsFailing", "NodemendAgentDown", "NodemendDetectionLatencyHigh"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// The dashboard parses, its panels have unique ids and use the datasource
// variable, and its queries use only exported metrics.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	type target struct {
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var dash struct {
		UID           string  `json:"uid"`
		Title         string  `json:"title"`
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
	}
	if err := json.Unmarshal(chartFile(t, "grafana-dashboard.json"), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion == 0 {
		t.Errorf("uid %q title %q schemaVersion %d", dash.UID, dash.Title, dash.SchemaVersion)
	}
	exported := exportedMetrics(t)
	ids := map[int]bool{}
	used := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource["uid"] != "${datasource}" {
					t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, tg.Datasource)
				}
				for _, n := range MetricNames(tg.Expr) {
					used[n] = true
					if !exported[n] {
						t.Errorf("panel %q uses %s, which no nodemend binary exports", p.Title, n)
					}
				}
			}
		}
	}
	walk(dash.Panels)
	// The subjects: fleet health, detections by reason, repairs and
	// blocks, detection latency, agent CPU and RSS.
	for _, want := range []string{"nodemend_unhealthy_nodes", "nodemend_agent_detections_total", "nodemend_repairs_started_total",
		"nodemend_repair_blocked_pools", "nodemend_agent_detection_to_write_seconds_bucket", "process_cpu_seconds_total",
		"process_resident_memory_bytes"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	if !strings.Contains(string(chartFile(t, "grafana-dashboard.json")), `"type": "datasource"`) {
		t.Error("no datasource template variable")
	}
}
