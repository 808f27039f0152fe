// Package metrics holds the agent's Prometheus metrics, on a registry of its
// own (no global state), and serves them with /healthz and /readyz.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Agent is the agent's metric set. A nil *Agent is valid and records nothing,
// so packages can be used without metrics in unit tests.
type Agent struct {
	Registry *prometheus.Registry

	detections       *prometheus.CounterVec
	conditionStatus  *prometheus.GaugeVec
	detectionToWrite *prometheus.HistogramVec
	statusWrites     *prometheus.CounterVec
	schedulerLag     prometheus.Histogram
	schedulerSkips   *prometheus.CounterVec
	sourceErrors     *prometheus.CounterVec
	checkErrors      *prometheus.CounterVec
	configReloads    *prometheus.CounterVec
	linesRead        *prometheus.CounterVec
	linesRejected    *prometheus.CounterVec
}

// NewAgent creates and registers the agent metrics.
func NewAgent() *Agent {
	m := &Agent{
		Registry: prometheus.NewRegistry(),
		detections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_detections_total", Help: "Detections by reason code and effective severity.",
		}, []string{"reason", "severity"}),
		conditionStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodemend_agent_condition_status", Help: "1 for the current status of each nodemend condition on this node.",
		}, []string{"condition", "status"}),
		detectionToWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodemend_agent_detection_to_write_seconds",
			Help:    "From the source timestamp of a detection to the node status write that published it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"condition"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_status_writes_total", Help: "Node status patches by result.",
		}, []string{"result"}),
		schedulerLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodemend_agent_scheduler_lag_seconds", Help: "How late periodic checks start after they are due.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5},
		}),
		schedulerSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_scheduler_skips_total", Help: "Check runs skipped because the previous run had not finished.",
		}, []string{"check"}),
		sourceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_source_errors_total", Help: "Errors reading a log source or host file.",
		}, []string{"source"}),
		checkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_check_errors_total", Help: "Periodic check runs that could not read their input.",
		}, []string{"check"}),
		configReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_config_reloads_total", Help: "Config loads by result (applied, rejected).",
		}, []string{"result"}),
		linesRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_log_lines_total", Help: "Log lines read, by source.",
		}, []string{"source"}),
		linesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemend_agent_log_lines_rejected_total",
			Help: "Log lines whose text matched a rule of the reason but whose writer the rule does not accept (a forgery, or a daemon logging under another's name): dropped, no finding. For debugging.",
		}, []string{"source", "reason"}),
	}
	m.Registry.MustRegister(m.detections, m.conditionStatus, m.detectionToWrite, m.statusWrites, m.schedulerLag,
		m.schedulerSkips, m.sourceErrors, m.checkErrors, m.configReloads, m.linesRead, m.linesRejected,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Agent) Detection(reason, severity string) {
	if m != nil {
		m.detections.WithLabelValues(reason, severity).Inc()
	}
}

func (m *Agent) ConditionStatus(condition, status string) {
	if m == nil {
		return
	}
	for _, s := range []string{"True", "False", "Unknown"} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.conditionStatus.WithLabelValues(condition, s).Set(v)
	}
}

func (m *Agent) ConditionRemoved(condition string) {
	if m != nil {
		for _, s := range []string{"True", "False", "Unknown"} {
			m.conditionStatus.DeleteLabelValues(condition, s)
		}
	}
}

func (m *Agent) DetectionToWrite(condition string, d time.Duration) {
	if m != nil {
		m.detectionToWrite.WithLabelValues(condition).Observe(d.Seconds())
	}
}

func (m *Agent) StatusWrite(ok bool) {
	if m != nil {
		m.statusWrites.WithLabelValues(result(ok, "success", "error")).Inc()
	}
}

func (m *Agent) SchedulerLag(d time.Duration) {
	if m != nil {
		m.schedulerLag.Observe(d.Seconds())
	}
}

func (m *Agent) SchedulerSkip(check string) {
	if m != nil {
		m.schedulerSkips.WithLabelValues(check).Inc()
	}
}

func (m *Agent) SourceError(source string) {
	if m != nil {
		m.sourceErrors.WithLabelValues(source).Inc()
	}
}

func (m *Agent) CheckError(check string) {
	if m != nil {
		m.checkErrors.WithLabelValues(check).Inc()
	}
}

func (m *Agent) ConfigReload(applied bool) {
	if m != nil {
		m.configReloads.WithLabelValues(result(applied, "applied", "rejected")).Inc()
	}
}

func (m *Agent) LineRead(source string) {
	if m != nil {
		m.linesRead.WithLabelValues(source).Inc()
	}
}

// LineRejected counts a line that matched a rule of reason in text but
// came from a writer the rule does not believe.
func (m *Agent) LineRejected(source, reason string) {
	if m != nil {
		m.linesRejected.WithLabelValues(source, reason).Inc()
	}
}

func result(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}
