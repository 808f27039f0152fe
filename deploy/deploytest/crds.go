package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// CRDSource is where `make generate` writes the CRDs; ChartCRDs is the
// chart's copy (Helm reads only files inside the chart).
func CRDSource() string { return filepath.Join(RepoRoot(), "deploy", "crds") }
func ChartCRDs() string { return filepath.Join(ChartDir(), "crds") }

// CRDFiles returns the YAML file names in dir, sorted.
func CRDFiles(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(matches))
	for _, m := range matches {
		names = append(names, filepath.Base(m))
	}
	sort.Strings(names)
	return names, nil
}

// ChartCRDsStale says how the chart's copy differs from deploy/crds; empty
// when in sync.
func ChartCRDsStale() ([]string, error) {
	src, err := CRDFiles(CRDSource())
	if err != nil {
		return nil, err
	}
	dst, err := CRDFiles(ChartCRDs())
	if err != nil {
		return nil, err
	}
	var diffs []string
	inChart := map[string]bool{}
	for _, n := range dst {
		inChart[n] = true
	}
	for _, n := range src {
		if !inChart[n] {
			diffs = append(diffs, n+": missing from the chart")
			continue
		}
		delete(inChart, n)
		a, err := os.ReadFile(filepath.Join(CRDSource(), n))
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(ChartCRDs(), n))
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(a, b) {
			diffs = append(diffs, n+": differs from deploy/crds")
		}
	}
	for n := range inChart {
		diffs = append(diffs, n+": in the chart but not in deploy/crds")
	}
	sort.Strings(diffs)
	return diffs, nil
}

// SyncChartCRDs makes the chart's copy equal to deploy/crds.
func SyncChartCRDs() error {
	if err := os.MkdirAll(ChartCRDs(), 0o755); err != nil {
		return err
	}
	old, err := CRDFiles(ChartCRDs())
	if err != nil {
		return err
	}
	for _, n := range old {
		if err := os.Remove(filepath.Join(ChartCRDs(), n)); err != nil {
			return err
		}
	}
	src, err := CRDFiles(CRDSource())
	if err != nil {
		return err
	}
	for _, n := range src {
		data, err := os.ReadFile(filepath.Join(CRDSource(), n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(ChartCRDs(), n), data, 0o644); err != nil {
			return fmt.Errorf("copying %s into the chart: %w", n, err)
		}
	}
	return nil
}
