package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// histogramSVG draws latencies (sorted) as a histogram a reader can use:
// the x axis in seconds with ticks at round values, the y axis in nodes per
// bucket with ticks, p50 and p99 marked, and goal (when not zero) drawn as
// a dashed line. Plain SVG, no plotting library.
func histogramSVG(title string, lat []time.Duration, goal time.Duration) string {
	const w, h, left, right, top, bottom, buckets = 720, 360, 60, 20, 40, 50, 40
	if len(lat) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" width="720" height="40"><text x="10" y="25">no data</text></svg>`
	}
	xMax := max(lat[len(lat)-1], goal).Seconds() * 1.05
	xMax = max(xMax, 0.001)
	counts := make([]int, buckets)
	for _, d := range lat {
		i := int(d.Seconds() / xMax * buckets)
		counts[min(max(i, 0), buckets-1)]++
	}
	yMax := 1
	for _, c := range counts {
		yMax = max(yMax, c)
	}
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	x := func(s float64) float64 { return float64(left) + s/xMax*pw }
	y := func(n float64) float64 { return float64(h-bottom) - n/float64(yMax)*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13">%s</text>`, left, escapeXML(title))
	bw := pw / buckets
	for i, c := range counts {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b7dd8"/>`, float64(left)+float64(i)*bw+0.5, y(float64(c)), max(bw-1, 0.5), float64(h-bottom)-y(float64(c)))
	}
	// Axes, ticks and their labels.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, top, left, h-bottom)
	for _, t := range ticks(xMax) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(t), h-bottom, x(t), h-bottom+5, x(t), h-bottom+18, trimFloat(t))
	}
	for _, t := range ticks(float64(yMax)) {
		if t != math.Trunc(t) {
			continue // whole nodes only
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left-5, y(t), left, y(t), left-8, y(t)+4, trimFloat(t))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds after the tolerations ended</text>`, float64(left)+pw/2, h-12)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">nodes per %s bucket</text>`,
		float64(top)+ph/2, float64(top)+ph/2, trimFloat(xMax/buckets)+" s")
	// Percentiles and the goal.
	mark := func(d time.Duration, label, color, dash string) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5"%s/><text x="%.1f" y="%d" fill="%s">%s %s</text>`,
			x(d.Seconds()), top, x(d.Seconds()), h-bottom, color, dash, x(d.Seconds())+3, top+12, color, label, d.Round(time.Millisecond))
	}
	// The quantiles of the nodes drawn (a storm cut short by its deadline
	// draws only those that got there).
	p50, _ := pct(lat, len(lat), 0.50)
	p99, _ := pct(lat, len(lat), 0.99)
	mark(p50, "p50", "#1a7f37", "")
	mark(p99, "p99", "#cf222e", "")
	if goal > 0 {
		mark(goal, "goal", "#6e7781", ` stroke-dasharray="4 3"`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// ticks are 4 to 10 round values (1, 2 or 5 times a power of ten) from 0
// up to limit.
func ticks(limit float64) []float64 {
	if limit <= 0 {
		return []float64{0}
	}
	step := math.Pow(10, math.Floor(math.Log10(limit)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1} {
		if limit/(step*m) <= 10 {
			step *= m
			break
		}
	}
	var out []float64
	for i := 0.0; i*step <= limit*1.0000001; i++ {
		// Rounded to the step's decimals: 3 × 0.1 is not 0.3 in floats.
		dec := math.Pow(10, max(0, -math.Floor(math.Log10(step))))
		out = append(out, math.Round(i*step*dec)/dec)
	}
	return out
}

func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
