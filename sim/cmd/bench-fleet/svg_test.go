package main

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTicksAreRound(t *testing.T) {
	for _, tt := range []struct {
		limit float64
		want  []float64
	}{
		{23.4, []float64{0, 5, 10, 15, 20}},
		{0.8, []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}},
		{1000, []float64{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}},
	} {
		if got := ticks(tt.limit); !slices.Equal(got, tt.want) {
			t.Errorf("ticks(%v) = %v, want %v", tt.limit, got, tt.want)
		}
	}
}

func TestHistogramMarksPercentilesAndGoal(t *testing.T) {
	var lat []time.Duration
	for i := range 1000 {
		lat = append(lat, time.Duration(i)*5*time.Millisecond)
	}
	svg := histogramSVG("decision <test>", lat, 6*time.Second)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed: %v", err)
	}
	for _, want := range []string{"p50 2.495s", "p99 4.945s", "goal 6s", "seconds after the tolerations ended", "nodes per", "&lt;test&gt;"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %q in the plot", want)
		}
	}
}

func TestDecisionBound(t *testing.T) {
	c := ceiling{patches: 5000, took: 10 * time.Second}
	if got := c.decisionBound(1000); got != 2500*time.Millisecond {
		t.Errorf("bound for 1000 due at 500/s = %v, want 1.2 × 2 s + 100 ms", got)
	}
}
