package kernel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// runCloudEvents reads the events the cloud scheduled for the instance. A
// node on no cloud that answers has none: that is not an input error.
func (m *Monitor) runCloudEvents(ctx context.Context) ([]detection.Finding, error) {
	evs, err := m.opts.CloudEvents(ctx)
	if errors.Is(err, cloudmeta.ErrNoCloud) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return CloudEventFindings(evs, m.env.Clock.Now()), nil
}

// CloudEventFindings turns the cloud's scheduled events into Warnings:
// ScheduledMaintenance for a reboot, retirement, stop, redeployment, freeze
// or maintenance window
// (one per event, so two events are two Events), SpotInterruption for a
// spot instance being reclaimed.
func CloudEventFindings(evs []cloudmeta.Event, now time.Time) []detection.Finding {
	var out []detection.Finding
	for _, ev := range evs {
		switch ev.Kind {
		case cloudmeta.Maintenance:
			subject := ev.ID
			if subject == "" {
				subject = ev.Code
			}
			msg := fmt.Sprintf("the cloud scheduled %s (%s) for this instance from %s", ev.Code, subject, stamp(ev.NotBefore, now))
			if !ev.NotAfter.IsZero() {
				msg += " until " + ev.NotAfter.UTC().Format(time.RFC3339)
			}
			if ev.Description != "" {
				msg += ": " + ev.Description
			}
			out = append(out, detection.Finding{Reason: health.ReasonScheduledMaintenance, Message: msg, Observed: now, Subject: subject})
		case cloudmeta.Interruption:
			out = append(out, detection.Finding{Reason: health.ReasonSpotInterruption, Observed: now, Subject: "spot",
				Message: fmt.Sprintf("the spot instance will be %s at %s", past(ev.Code), stamp(ev.NotBefore, now))})
		}
	}
	return out
}

// stamp is a time with how far ahead it is.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	s := t.UTC().Format(time.RFC3339)
	if d := t.Sub(now); d > 0 {
		s += fmt.Sprintf(" (in %s)", d.Round(time.Second))
	}
	return s
}

// past is a spot action as its past participle.
func past(action string) string {
	switch action {
	case "terminate":
		return "terminated"
	case "stop":
		return "stopped"
	case "hibernate":
		return "hibernated"
	case "preempt":
		// Azure's Preempt: the spot VM is evicted (deallocated or
		// deleted, per its eviction policy).
		return "evicted"
	}
	return "interrupted (" + action + ")"
}
