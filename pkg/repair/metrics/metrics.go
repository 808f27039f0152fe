// Package metrics holds the repair controller's Prometheus metrics. They are
// registered on the Registerer the caller passes (controller-runtime's
// registry in the binary, a fresh one per controller in tests), never on a
// package global.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FleetNode is one unhealthy node, as the fleet gauges count it.
type FleetNode struct {
	Pool      string
	Condition string
}

// Fleet reports the current state the gauges are computed from at scrape
// time, so they never drift from the cluster.
type Fleet interface {
	// Unhealthy lists, for every node unhealthy under its policy, its pool
	// and each unhealthy condition type (a node repaired because of one
	// condition but with none unhealthy any more counts as "InRepair").
	Unhealthy() []FleetNode
	// Blocked lists the pools (and gates) where repairs are blocked now.
	Blocked() map[string]string
	// Paused reports the pause switch.
	Paused() bool
	// Quarantined counts the quarantined nodes per pool.
	Quarantined() map[string]int
}

// Metrics is the controller's metric set. A nil *Metrics records nothing.
type Metrics struct {
	started, succeeded, failed *prometheus.CounterVec
	toStart, toGone            *prometheus.HistogramVec
	drain                      prometheus.Histogram
	blockedEvents              *prometheus.CounterVec
	rungs                      *prometheus.CounterVec
}

// Repair-time buckets: tolerations are minutes, repairs tens of minutes.
var repairBuckets = []float64{60, 300, 600, 900, 1200, 1800, 2400, 3600, 5400, 7200, 14400, 28800}

// New creates the metrics and registers them, with a collector for the
// fleet gauges, on reg.
func New(reg prometheus.Registerer, fleet Fleet) *Metrics {
	m := &Metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_repairs_started_total", Help: "Repairs started (node tainted), by the condition type and reason that triggered them.",
		}, []string{"condition", "reason"}),
		succeeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_repairs_succeeded_total", Help: "Repairs finished (the node object is gone), by triggering condition type and reason.",
		}, []string{"condition", "reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_repairs_failed_total", Help: "Repairs that failed (no backend target, or the node outlived the termination timeout), by triggering condition type and reason.",
		}, []string{"condition", "reason"}),
		toStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodemend_repair_unhealthy_to_start_seconds", Help: "From the start of the unhealthy period to the repair start (taint).",
			Buckets: repairBuckets,
		}, []string{"condition"}),
		toGone: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodemend_repair_unhealthy_to_gone_seconds", Help: "From the start of the unhealthy period to the node object being gone.",
			Buckets: repairBuckets,
		}, []string{"condition"}),
		drain: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodemend_repair_drain_duration_seconds", Help: "From the repair start (taint) to the node being handed to its backend.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600},
		}),
		blockedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_repair_blocked_total", Help: "Repair decisions that a gate blocked (once per node and blocking reason), by gate.",
		}, []string{"gate"}),
		rungs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_repair_rungs_total", Help: "Ladder rung steps, by rung action and result: Ordered, Rebooted, Repaired (node back in service), Failed (the ladder goes on), Quarantined, Released.",
		}, []string{"action", "result"}),
	}
	reg.MustRegister(m.started, m.succeeded, m.failed, m.toStart, m.toGone, m.drain, m.blockedEvents, m.rungs, &fleetCollector{fleet: fleet})
	return m
}

// Started records a repair start.
func (m *Metrics) Started(condition, reason string, sinceUnhealthy time.Duration) {
	if m == nil {
		return
	}
	m.started.WithLabelValues(condition, reason).Inc()
	m.toStart.WithLabelValues(condition).Observe(sinceUnhealthy.Seconds())
}

// Drained records the end of a drain.
func (m *Metrics) Drained(d time.Duration) {
	if m != nil {
		m.drain.Observe(d.Seconds())
	}
}

// Succeeded records a node gone after its repair.
func (m *Metrics) Succeeded(condition, reason string, sinceUnhealthy time.Duration) {
	if m == nil {
		return
	}
	m.succeeded.WithLabelValues(condition, reason).Inc()
	m.toGone.WithLabelValues(condition).Observe(sinceUnhealthy.Seconds())
}

// Failed records a failed repair.
func (m *Metrics) Failed(condition, reason string) {
	if m != nil {
		m.failed.WithLabelValues(condition, reason).Inc()
	}
}

// Rung records a step of a ladder rung.
func (m *Metrics) Rung(action, result string) {
	if m != nil {
		m.rungs.WithLabelValues(action, result).Inc()
	}
}

// Blocked records a blocked decision.
func (m *Metrics) Blocked(gate string) {
	if m != nil {
		m.blockedEvents.WithLabelValues(gate).Inc()
	}
}

var (
	unhealthyDesc = prometheus.NewDesc("nodemend_unhealthy_nodes",
		"Nodes unhealthy under their repair policy (tolerated or not, including nodes under repair), by pool and condition type.",
		[]string{"pool", "condition"}, nil)
	blockedDesc = prometheus.NewDesc("nodemend_repair_blocked_pools",
		"1 for each pool (or zone) where repairs are blocked now, by the gate that blocks.", []string{"pool", "gate"}, nil)
	pausedDesc      = prometheus.NewDesc("nodemend_repair_paused", "1 while the cluster-wide pause switch is on.", nil, nil)
	quarantinedDesc = prometheus.NewDesc("nodemend_quarantined_nodes",
		"Nodes quarantined for a person (cordoned and tainted until released), by pool.", []string{"pool"}, nil)
)

type fleetCollector struct{ fleet Fleet }

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- unhealthyDesc
	ch <- blockedDesc
	ch <- pausedDesc
	ch <- quarantinedDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[FleetNode]int{}
	for _, n := range c.fleet.Unhealthy() {
		counts[n]++
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(unhealthyDesc, prometheus.GaugeValue, float64(v), k.Pool, k.Condition)
	}
	for p, g := range c.fleet.Blocked() {
		ch <- prometheus.MustNewConstMetric(blockedDesc, prometheus.GaugeValue, 1, p, g)
	}
	paused := 0.0
	if c.fleet.Paused() {
		paused = 1
	}
	ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, paused)
	for p, n := range c.fleet.Quarantined() {
		ch <- prometheus.MustNewConstMetric(quarantinedDesc, prometheus.GaugeValue, float64(n), p)
	}
}
