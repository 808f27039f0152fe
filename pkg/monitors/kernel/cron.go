package kernel

import (
	"fmt"
	"math"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// --- RapidCron ---------------------------------------------------------------

// maxCronJobs bounds the jobs remembered: a node has a few dozen; a
// crontab that generates commands must not grow the agent without bound.
const maxCronJobs = 1024

// cronRuns remembers when each cron job (user and command) last started.
// It is only used from Interpret, which the agent serializes.
type cronRuns struct {
	last map[cronJob]time.Time
}

type cronJob struct{ user, command string }

// started records a cron job start and reports RapidCron when the same job
// started less than threshold seconds before. Intervals are rounded to the
// minute, cron's resolution, so that a job every five minutes whose log
// lines are a few milliseconds less than five minutes apart is not "faster
// than every five minutes".
func (c *cronRuns) started(match logline.Match, thresholdSeconds float64) []detection.Finding {
	job := cronJob{user: match.Groups["user"], command: match.Groups["cmd"]}
	at := match.Line.Time
	if c.last == nil {
		c.last = map[cronJob]time.Time{}
	}
	prev, seen := c.last[job]
	if !seen && len(c.last) >= maxCronJobs {
		c.evictOldest()
	}
	if !seen || at.After(prev) {
		c.last[job] = at
	}
	// A line at or before the last start is a replay (the journal reader
	// restarted) or arrived out of order: not a new run.
	if !seen || !at.After(prev) || math.IsNaN(thresholdSeconds) || thresholdSeconds <= 0 {
		return nil
	}
	interval := at.Sub(prev).Round(time.Minute)
	limit := time.Duration(math.Min(thresholdSeconds, 1e9) * float64(time.Second))
	if interval >= limit {
		return nil
	}
	return []detection.Finding{{
		Reason: health.ReasonRapidCron,
		Message: fmt.Sprintf("cron job of %s runs every %v, more often than every %v: %s",
			job.user, interval, limit, job.command),
		Observed: at,
		Subject:  job.user + ": " + job.command,
	}}
}

func (c *cronRuns) evictOldest() {
	var oldest cronJob
	var t time.Time
	first := true
	for j, at := range c.last {
		if first || at.Before(t) {
			oldest, t, first = j, at, false
		}
	}
	delete(c.last, oldest)
}
