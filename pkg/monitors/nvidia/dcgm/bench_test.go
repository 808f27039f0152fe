package dcgm

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkHealthCheck parses and maps every health fixture once per
// iteration: the agent's work for one health check of a badly failing node.
func BenchmarkHealthCheck(b *testing.B) {
	files, _ := filepath.Glob("testdata/health/*.json")
	var docs [][]byte
	var size int64
	for _, f := range files {
		d, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, d)
		size += int64(len(d))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range docs {
			r, err := ParseHealth(d)
			if err != nil {
				b.Fatal(err)
			}
			_ = HealthFindings(r)
		}
	}
}

// BenchmarkHealthyCheck is a health check of a healthy node, the common case.
func BenchmarkHealthyCheck(b *testing.B) {
	d, err := os.ReadFile("testdata/health/pass.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, _ := ParseHealth(d)
		_ = HealthFindings(r)
	}
}
