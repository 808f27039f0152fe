package testenv

import (
	"os"
	"sync"
)

// The prometheus-operator CRDs that the chart's optional PodMonitor,
// ServiceMonitor and PrometheusRule are checked against, read like the
// engines' CRDs from the module zip at a pinned version.
const (
	PrometheusOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	PrometheusOperatorVersion = "v0.85.0"
)

var (
	monitoringOnce sync.Once
	monitoringDir  string
	monitoringErr  error
)

// MonitoringCRDs returns a directory holding the PodMonitor, ServiceMonitor
// and PrometheusRule CRDs, for Options.CRDDirectoryPaths; created once per
// process in the system temp directory.
func MonitoringCRDs() (string, error) {
	monitoringOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodemend-monitoring-crds-")
		if err != nil {
			monitoringErr = err
			return
		}
		const base = "example/prometheus-operator-crd/monitoring.coreos.com_"
		monitoringErr = extractModuleFiles(PrometheusOperatorModule, PrometheusOperatorVersion,
			[]string{base + "podmonitors.yaml", base + "servicemonitors.yaml", base + "prometheusrules.yaml"}, dir)
		monitoringDir = dir
	})
	return monitoringDir, monitoringErr
}
