package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// throttle is one cgroup's CPU throttling.
type throttle struct {
	cgroup               string
	periods, throttled   int64
	throttledUsec        int64
	oomKills, memoryHigh int64
}

// parseCPUStat reads cpu.stat: cgroup v2 (nr_periods, nr_throttled,
// throttled_usec) or v1 (throttled_time in ns).
func parseCPUStat(s string) (periods, throttled, throttledUsec int64) {
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		case "throttled_usec":
			throttledUsec = n
		case "throttled_time":
			throttledUsec = n / 1000
		}
	}
	return periods, throttled, throttledUsec
}

// parseMemoryEvents reads memory.events (v2): oom_kill and high counts.
func parseMemoryEvents(s string) (oomKills, high int64) {
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "oom_kill":
			oomKills = n
		case "high":
			high = n
		}
	}
	return oomKills, high
}

// formatThrottling lists the throttled and OOM-killing cgroups, worst first
// (at most top).
func formatThrottling(ts []throttle, top int) []byte {
	var hit []throttle
	for _, t := range ts {
		if t.throttled > 0 || t.oomKills > 0 {
			hit = append(hit, t)
		}
	}
	sort.Slice(hit, func(i, j int) bool {
		if hit[i].throttledUsec != hit[j].throttledUsec {
			return hit[i].throttledUsec > hit[j].throttledUsec
		}
		return hit[i].cgroup < hit[j].cgroup
	})
	if len(hit) > top {
		hit = hit[:top]
	}
	rows := make([][]string, 0, len(hit))
	for _, t := range hit {
		pct := "-"
		if t.periods > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*float64(t.throttled)/float64(t.periods))
		}
		rows = append(rows, []string{t.cgroup, strconv.FormatInt(t.throttled, 10), strconv.FormatInt(t.periods, 10), pct,
			(time.Duration(t.throttledUsec) * time.Microsecond).String(), strconv.FormatInt(t.oomKills, 10)})
	}
	return table([]string{"CGROUP", "THROTTLED", "PERIODS", "RATIO", "THROTTLED_TIME", "OOM_KILLS"}, rows)
}

// cgroupLimit bounds the cgroup walk (kubepods on a dense node: thousands).
const cgroupLimit = 20000

func (e *Env) cgroups(ctx context.Context, out *collect.Output) error {
	root := e.hostPath("sys/fs/cgroup")
	if _, err := os.Stat(root); err != nil {
		return collect.Skip("no /sys/fs/cgroup")
	}
	var ts []throttle
	dirs := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.IsDir() {
			return nil
		}
		if dirs++; dirs > cgroupLimit {
			return fs.SkipAll
		}
		stat, err := os.ReadFile(filepath.Join(path, "cpu.stat"))
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		t := throttle{cgroup: "/" + filepath.ToSlash(rel)}
		t.periods, t.throttled, t.throttledUsec = parseCPUStat(string(stat))
		if ev, err := os.ReadFile(filepath.Join(path, "memory.events")); err == nil {
			t.oomKills, t.memoryHigh = parseMemoryEvents(string(ev))
		}
		ts = append(ts, t)
		return nil
	})
	if err != nil && !errors.Is(err, fs.SkipAll) {
		return err
	}
	if err := out.WriteFile("cgroup-throttling.txt", formatThrottling(ts, 200)); err != nil {
		return err
	}
	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
		if data, err := os.ReadFile(filepath.Join(root, f)); err == nil {
			if err := out.WriteFile("cgroup-root-"+f, data); err != nil {
				return err
			}
		}
	}
	return nil
}
