package exporter

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Detection is a finding with the effective registry entry of its reason
// (severity and thresholds after config overrides).
type Detection struct {
	Reason  health.Reason
	Finding detection.Finding
}

// book is the pure condition state machine: it holds the active Fatal faults
// per condition type and computes the conditions to publish. It does no I/O
// and reads no clock: every method takes "now".
type book struct {
	conds map[health.ConditionType]*condState
	// custom are the operator's reasons (the agent config's custom rules,
	// checks and promotions), which the registry does not know.
	custom map[string]health.Reason
}

// lookup finds a reason in the registry or among the operator's.
func (b *book) lookup(name string) (health.Reason, bool) {
	if r, ok := health.LookupReason(name); ok {
		return r, true
	}
	r, ok := b.custom[name]
	return r, ok
}

type condState struct {
	monitor health.Monitor
	enabled bool
	faults  map[faultKey]*fault
	// status and since are what was last computed; since is the
	// LastTransitionTime and only moves when status changes.
	status corev1.ConditionStatus
	since  time.Time
}

type faultKey struct{ reason, subject string }

type fault struct {
	reason  health.Reason
	message string
	// first is when the fault became active; it orders faults so the
	// condition's reason is stable while several are active.
	first time.Time
	// expires is when a log-derived fault recovers unless seen again;
	// zero for check-derived faults, which recover only through their check.
	expires time.Time
}

func newBook() *book {
	return &book{conds: map[health.ConditionType]*condState{}}
}

// setMonitors declares which monitors run. Conditions of other types are to be
// absent from the node.
func (b *book) setMonitors(ms []health.Monitor) {
	enabled := map[health.ConditionType]health.Monitor{}
	for _, m := range ms {
		enabled[m.Condition] = m
	}
	for _, t := range health.ConditionTypes() {
		m, on := enabled[t]
		c := b.cond(t)
		if on {
			c.monitor = m
		} else {
			c.faults = map[faultKey]*fault{}
		}
		c.enabled = on
	}
}

func (b *book) cond(t health.ConditionType) *condState {
	c, ok := b.conds[t]
	if !ok {
		c = &condState{faults: map[faultKey]*fault{}}
		b.conds[t] = c
	}
	return c
}

// adopt takes over a condition found on the node at start, so that a restarted
// agent keeps an active fault False with its original LastTransitionTime. A
// log-derived fault gets a fresh quiet period (the log that proved it is gone);
// a check-derived one stays until its check passes.
//
// With earlierBoot (the conditions were written during an earlier boot of
// the host), log-derived faults are dropped instead: the boot whose log
// proved them is over, and a reboot is how nodemend repairs them. Polled
// faults stay until their check runs.
func (b *book) adopt(existing corev1.NodeCondition, now time.Time, earlierBoot bool) {
	t := health.ConditionType(existing.Type)
	c := b.cond(t)
	if !c.enabled {
		return
	}
	c.status, c.since = existing.Status, existing.LastTransitionTime.Time
	if existing.Status != corev1.ConditionFalse {
		return
	}
	r, ok := b.lookup(existing.Reason)
	if !ok || r.Condition != t || r.Severity != health.Fatal {
		// Unknown, moved or downgraded reason: nothing holds it False now.
		return
	}
	f := &fault{reason: r, message: existing.Message, first: existing.LastTransitionTime.Time}
	if r.Source == health.FromLog {
		if earlierBoot {
			return
		}
		f.expires = now.Add(r.QuietPeriod)
	}
	c.faults[faultKey{reason: r.Name}] = f
}

// observe records a log-derived detection. It returns true when the
// condition to publish may have changed.
func (b *book) observe(d Detection, now time.Time) bool {
	c := b.cond(d.Reason.Condition)
	if !c.enabled || d.Reason.Severity != health.Fatal {
		return false
	}
	k := faultKey{d.Reason.Name, d.Finding.Subject}
	quiet := d.Reason.QuietPeriod
	if quiet <= 0 {
		quiet = defaultQuietPeriod
	}
	f, ok := c.faults[k]
	if !ok {
		c.faults[k] = &fault{reason: d.Reason, message: d.Finding.Message, first: now, expires: now.Add(quiet)}
		return true
	}
	changed := f.message != d.Finding.Message
	f.message, f.expires = d.Finding.Message, now.Add(quiet)
	return changed
}

// defaultQuietPeriod applies to a log-derived reason raised to Fatal without a
// quiet period of its own; longer than the longest default toleration.
const defaultQuietPeriod = 45 * time.Minute

// checkResult replaces the active faults that a check owns: faults of its
// reasons absent from ds have recovered.
func (b *book) checkResult(reasons []string, ds []Detection, now time.Time) bool {
	owned := map[string]bool{}
	for _, r := range reasons {
		owned[r] = true
	}
	seen := map[faultKey]bool{}
	changed := false
	for _, d := range ds {
		c := b.cond(d.Reason.Condition)
		if !c.enabled || d.Reason.Severity != health.Fatal {
			continue
		}
		k := faultKey{d.Reason.Name, d.Finding.Subject}
		seen[k] = true
		if f, ok := c.faults[k]; ok {
			changed = changed || f.message != d.Finding.Message
			f.message = d.Finding.Message
			// A check that sees a fault a log or stream raised first (NVML's
			// double-bit ECC event before the counter check) takes it over:
			// it now lasts while the check sees it, not for a quiet period.
			f.expires = time.Time{}
			continue
		}
		c.faults[k] = &fault{reason: d.Reason, message: d.Finding.Message, first: now}
		changed = true
	}
	for _, c := range b.conds {
		for k, f := range c.faults {
			// Only check-derived faults (no expiry) recover through their check.
			if owned[k.reason] && !seen[k] && f.expires.IsZero() {
				delete(c.faults, k)
				changed = true
			}
		}
	}
	return changed
}

// expire drops log-derived faults whose quiet period has passed and returns
// the next time one will expire (zero when none).
func (b *book) expire(now time.Time) (next time.Time) {
	for _, c := range b.conds {
		for k, f := range c.faults {
			if f.expires.IsZero() {
				continue
			}
			if !now.Before(f.expires) {
				delete(c.faults, k)
				continue
			}
			if next.IsZero() || f.expires.Before(next) {
				next = f.expires
			}
		}
	}
	return next
}

// desired computes the conditions to publish and updates transition times.
// Disabled types are returned in removed.
func (b *book) desired(now time.Time) (conds []corev1.NodeCondition, removed []health.ConditionType) {
	for _, t := range health.ConditionTypes() {
		c, ok := b.conds[t]
		if !ok || !c.enabled {
			removed = append(removed, t)
			continue
		}
		status, reason, message := corev1.ConditionTrue, c.monitor.HealthyReason, healthyMessage(t)
		if len(c.faults) > 0 {
			status = corev1.ConditionFalse
			reason, message = summarize(c.faults)
		}
		if status != c.status || c.since.IsZero() {
			c.status, c.since = status, now
		}
		conds = append(conds, corev1.NodeCondition{
			Type:    corev1.NodeConditionType(t),
			Status:  status,
			Reason:  reason,
			Message: message,
			// LastTransitionTime only moves when the status does: a False
			// condition whose message changes must not restart the repair clock.
			LastTransitionTime: metav1Time(c.since),
		})
	}
	return conds, removed
}

func healthyMessage(t health.ConditionType) string {
	return fmt.Sprintf("nodemend is monitoring %s; no fault is active", strings.TrimSuffix(string(t), "Ready"))
}

// summarize names the active fault with the heaviest remedy (the
// registry's, from the vendor's catalogue), the oldest of those, and how
// many others there are. The condition's reason is what the controller
// starts its ladder from: naming a fault a GPU reset resolves while another
// needs a reboot or new hardware would start with a rung that cannot help.
// On conditions whose reasons name no remedy this is the oldest fault.
func summarize(faults map[faultKey]*fault) (reason, message string) {
	list := make([]*fault, 0, len(faults))
	for _, f := range faults {
		list = append(list, f)
	}
	sort.Slice(list, func(i, j int) bool {
		if wi, wj := list[i].reason.Remedy.Weight(), list[j].reason.Remedy.Weight(); wi != wj {
			return wi > wj
		}
		if !list[i].first.Equal(list[j].first) {
			return list[i].first.Before(list[j].first)
		}
		if list[i].reason.Name != list[j].reason.Name {
			return list[i].reason.Name < list[j].reason.Name
		}
		return list[i].message < list[j].message
	})
	first := list[0]
	message = first.message
	if n := len(list) - 1; n > 0 {
		others := map[string]bool{}
		for _, f := range list[1:] {
			others[f.reason.Name] = true
		}
		names := make([]string, 0, len(others))
		for n := range others {
			names = append(names, n)
		}
		sort.Strings(names)
		message = fmt.Sprintf("%s (and %d more active: %s)", message, n, strings.Join(names, ", "))
	}
	// Within the bounds the admission policy enforces (pkg/health).
	return first.reason.Name, health.BoundMessage(message)
}
