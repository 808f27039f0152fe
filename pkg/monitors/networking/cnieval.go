package networking

import (
	"fmt"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// cniEval is what the CNI evaluation remembers between checks.
type cniEval struct {
	// missingSince is when each installed CNI's agent was first seen not
	// running; notReadySince when it was first seen not ready.
	missingSince  map[string]time.Time
	notReadySince map[string]time.Time
}

// evalCNI reports, for each installed CNI, its NotRunning reason when the
// agent has not been running for at least its threshold, and its NotReady
// reason when the agent runs but has not been ready for at least its
// threshold. A CNI that is not installed is not a fault and is forgotten.
// Messages name when the fault began, not how long it lasts, so that a
// standing fault does not rewrite the condition on every check.
func evalCNI(prev cniEval, obs []cniObservation, thr func(string) time.Duration, now time.Time) (cniEval, []detection.Finding) {
	next := cniEval{missingSince: map[string]time.Time{}, notReadySince: map[string]time.Time{}}
	var fs []detection.Finding
	for _, o := range obs {
		name := o.Spec.Name
		if o.PID == 0 {
			since, ok := prev.missingSince[name]
			if !ok {
				since = now
			}
			next.missingSince[name] = since
			if d := now.Sub(since); d >= thr(o.Spec.NotRunning) {
				fs = append(fs, detection.Finding{
					Reason: o.Spec.NotRunning,
					Message: fmt.Sprintf("%s is installed (/etc/cni/net.d/%s) but its agent %s has not been running since %s: pods on this node get no network",
						name, o.Config, o.Spec.Agent, since.UTC().Format(time.RFC3339)),
					Observed: now,
					Subject:  name,
				})
			}
			continue
		}
		if !o.NotReady {
			continue
		}
		since := o.NotReadySince
		if since.IsZero() {
			var ok bool
			if since, ok = prev.notReadySince[name]; !ok {
				since = now
			}
		}
		next.notReadySince[name] = since
		if d := now.Sub(since); d >= thr(o.Spec.NotReady) {
			fs = append(fs, detection.Finding{
				Reason: o.Spec.NotReady,
				Message: fmt.Sprintf("%s agent %s has not been ready since %s: %s",
					name, o.Spec.Agent, since.UTC().Format(time.RFC3339), o.Detail),
				Observed: now,
				Subject:  name,
			})
		}
	}
	return next, fs
}

// evalIPAMDEvents reports what the VPC CNI's log said since the previous
// check: IPAMDNoIPs when IPAMD had no address to give, and
// IPAMDRepeatedlyRestart while it started at least restarts times within
// the last hour.
func evalIPAMDEvents(obs []cniObservation, restarts int, now time.Time) []detection.Finding {
	var fs []detection.Finding
	for _, o := range obs {
		if o.Spec.Readiness != readinessIPAMDLog {
			continue
		}
		if o.IPAMDNoIPs != "" {
			fs = append(fs, detection.Finding{
				Reason:   health.ReasonIPAMDNoIPs,
				Message:  "IPAMD has no IP address for new pods, which stay in ContainerCreating: ipamd.log: " + oneLine([]byte(o.IPAMDNoIPs)),
				Observed: now,
				Subject:  o.Spec.Name,
			})
		}
		var recent int
		for _, t := range o.IPAMDStarts {
			if now.Sub(t) <= restartWindow {
				recent++
			}
		}
		if recent >= restarts {
			fs = append(fs, detection.Finding{
				Reason:   health.ReasonIPAMDRepeatedlyRestart,
				Message:  fmt.Sprintf("IPAMD started %d times within the last hour (threshold %d): pod networking on the node flaps with it", recent, restarts),
				Observed: now,
				Subject:  o.Spec.Name,
			})
		}
	}
	return fs
}
