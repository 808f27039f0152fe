package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/health"
)

// AgentQuietPeriods is what the controller knows of the quiet periods the
// nodes' agents give log-derived reasons: the registry's, unless an agent's
// config overrides them (reasons.<reason>.quietPeriod, docs/agent-config.md).
type AgentQuietPeriods struct {
	// Known: the agents' configuration was read; Overrides are its
	// quietPeriod overrides by reason (families expanded), From names where
	// it was read.
	Known     bool
	Overrides map[string]time.Duration
	From      string
	// SetBy names, by reason, the entry of the agents' reasons section that
	// set its override (its own name or a family's), for the messages.
	SetBy map[string]string
	// Unknown says why the agents' configuration is not known (a systemd
	// agent reads its own file, the ConfigMap was not found or not
	// readable): such an agent may have shortened any quiet period down to
	// health.MinQuietPeriod.
	Unknown string
}

// RegistryQuietPeriods is the knowledge that the agents use the registry's
// quiet periods (no overrides).
func RegistryQuietPeriods(from string) AgentQuietPeriods {
	return AgentQuietPeriods{Known: true, From: from}
}

// quietPeriod is the quiet period of a log-derived Fatal reason r on the
// agents, and whether the agents' configuration set it.
func (a AgentQuietPeriods) quietPeriod(r health.Reason) (time.Duration, bool) {
	if d, ok := a.Overrides[r.Name]; ok && a.Known {
		return d, true
	}
	return r.QuietPeriod, false
}

// setBy says where the override of reason was set, for an operator who
// must find it: the entry and the file.
func (a AgentQuietPeriods) setBy(reason string) string {
	if entry, ok := a.SetBy[reason]; ok {
		return fmt.Sprintf("reasons.%s.quietPeriod in %s", entry, a.From)
	}
	return a.From
}

// logDerived are the Fatal log-derived reasons of condition t that a rule
// limited to reasons (empty: any) acts on. Only such faults recover by
// themselves after a quiet period; the others recover when their check
// passes, which a toleration can wait for.
func logDerived(t corev1.NodeConditionType, reasons []string) []health.Reason {
	var out []health.Reason
	for _, r := range health.Reasons() {
		if string(r.Condition) != string(t) || r.Severity != health.Fatal || r.Source != health.FromLog {
			continue
		}
		if len(reasons) > 0 && !slices.Contains(reasons, r.Name) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// checkQuietPeriods compares a rule's toleration with the quiet period of
// every log-derived reason it acts on: a rule whose toleration is not
// shorter never repairs that fault — the condition recovers first, and a
// fault that keeps coming back starts the toleration over each time. That
// is an error naming the rule and the reason. Where the agents' quiet
// periods are unknown, a toleration the registry allows but an agent's own
// config could defeat (one of at least health.MinQuietPeriod, the agents'
// floor) is a warning that says so.
func checkQuietPeriods(r Rule, agents AgentQuietPeriods) (warning string, err error) {
	if r.Status != corev1.ConditionFalse || !health.IsOwned(string(r.Type)) {
		return "", nil
	}
	rs := logDerived(r.Type, r.Reasons)
	var atRisk []string
	for _, reason := range rs {
		q, overridden := agents.quietPeriod(reason)
		if r.Toleration >= q {
			whose := fmt.Sprintf("the registry's quiet period %v", q)
			if overridden {
				whose = fmt.Sprintf("the quiet period %v the agents' configuration (%s) gives it", q, agents.setBy(reason.Name))
			}
			return "", fmt.Errorf("rule on %s=False: toleration %v is not shorter than %s of %s, a log-derived reason it acts on: "+
				"the condition recovers before the toleration ends and that fault is never repaired; shorten the toleration below %v, "+
				"or list the reasons the rule acts on without it (docs/repair.md)", r.Type, r.Toleration, whose, reason.Name, q)
		}
		if !agents.Known && r.Toleration >= health.MinQuietPeriod {
			atRisk = append(atRisk, reason.Name)
		}
	}
	if len(atRisk) == 0 {
		return "", nil
	}
	return fmt.Sprintf("rule on %s=False (toleration %v) acts on log-derived reasons whose quiet period the agents' configuration may shorten, "+
		"and the controller does not know it (%s): %s. Where an agent sets reasons.<reason>.quietPeriod to %v or less, that fault is never repaired",
		r.Type, r.Toleration, agents.Unknown, summarizeNames(atRisk), r.Toleration), nil
}

// summarizeNames lists names, the first few of a long list and how many
// more.
func summarizeNames(names []string) string {
	const shown = 4
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}
