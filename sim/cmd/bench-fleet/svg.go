package main

import (
	"fmt"
	"strings"
	"time"
)

// histogramSVG draws the decision latencies as a bar chart: 20 buckets
// from 0 to the maximum. Plain SVG, no plotting library.
func histogramSVG(lat []time.Duration) string {
	const w, h, pad, buckets = 640, 320, 40, 20
	if len(lat) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" width="640" height="40"><text x="10" y="25">no data</text></svg>`
	}
	maxLat := lat[len(lat)-1]
	if maxLat <= 0 {
		maxLat = time.Millisecond
	}
	counts := make([]int, buckets)
	for _, d := range lat {
		i := int(float64(d) / float64(maxLat) * buckets)
		counts[min(max(i, 0), buckets-1)]++
	}
	top := 1
	for _, c := range counts {
		top = max(top, c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13">nodemend-controller decision latency, %d nodes (toleration end → taint)</text>`, pad, len(lat))
	bw := float64(w-2*pad) / buckets
	for i, c := range counts {
		bh := float64(h-2*pad) * float64(c) / float64(top)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b7dd8"/>`, float64(pad)+float64(i)*bw+1, float64(h-pad)-bh, bw-2, bh)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, pad, h-pad, w-pad, h-pad)
	fmt.Fprintf(&b, `<text x="%d" y="%d">0</text><text x="%d" y="%d" text-anchor="end">%v</text>`, pad, h-pad+15, w-pad, h-pad+15, maxLat.Round(time.Millisecond))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%d</text>`, pad-4, pad+4, top)
	b.WriteString(`</svg>`)
	return b.String()
}
