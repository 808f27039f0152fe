package policy

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// AgentConfigKey is the key of the agents' ConfigMap that holds their config
// file: the chart's DaemonSet mounts it as /etc/nodemend/agent.yaml.
const AgentConfigKey = "agent.yaml"

// FromAgentConfigMap is what the agents' ConfigMap says of their quiet
// periods: known from the config file under AgentConfigKey, or unknown,
// with why, where it holds none the agents accept.
func FromAgentConfigMap(cm *corev1.ConfigMap) AgentQuietPeriods {
	where := fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	data, ok := cm.Data[AgentConfigKey]
	if !ok {
		return AgentQuietPeriods{Unknown: fmt.Sprintf("%s has no %s, the agents' config file", where, AgentConfigKey)}
	}
	agents, err := ParseAgentQuietPeriods([]byte(data), where)
	if err != nil {
		return AgentQuietPeriods{Unknown: fmt.Sprintf("%s: %s is not a config the agents accept: %v", where, AgentConfigKey, err)}
	}
	return agents
}

// agentReasons is the one section of the agent's config file the controller
// reads. The repair side may not import the agent (internal/layering), and
// needs no more of its file than this: the rest is ignored, not checked.
type agentReasons struct {
	Reasons map[string]struct {
		QuietPeriod *detection.Duration `json:"quietPeriod,omitempty"`
	} `json:"reasons,omitempty"`
}

// ParseAgentQuietPeriods reads the quietPeriod overrides of an agent config
// file (docs/agent-config.md, reasons.<reason-or-family>.quietPeriod) as the
// agent applies them: a family's entry gives every member its period, a
// reason's own entry wins over its families'. from names where the file was
// read, for the messages that quote an override. An entry the agent would
// refuse (an unknown name, a period under health.MinQuietPeriod, on no
// log-derived reason) is an error: an agent refuses the whole file, so what
// it runs is not this file. The file's other mistakes are the agent's to
// find (its InvalidAgentConfig event): the controller reads only this.
func ParseAgentQuietPeriods(data []byte, from string) (AgentQuietPeriods, error) {
	var doc agentReasons
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return AgentQuietPeriods{}, fmt.Errorf("not an agent config: %w", err)
	}
	periods := map[string]time.Duration{}
	var errs []error
	for name, rc := range doc.Reasons {
		// Any entry the agent does not know makes it refuse the file,
		// whatever the entry sets.
		if _, ok := health.Expand(name); !ok {
			errs = append(errs, fmt.Errorf("reasons.%s: unknown reason or family", name))
			continue
		}
		if rc.QuietPeriod == nil {
			continue
		}
		if err := checkQuietOverride(name, rc.QuietPeriod.Duration); err != nil {
			errs = append(errs, err)
			continue
		}
		periods[name] = rc.QuietPeriod.Duration
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return AgentQuietPeriods{}, errors.Join(errs...)
	}
	out := AgentQuietPeriods{Known: true, From: from}
	for _, r := range health.Reasons() {
		if r.Source != health.FromLog {
			continue
		}
		if entry, ok := overridingEntry(r.Name, periods); ok {
			if out.Overrides == nil {
				out.Overrides, out.SetBy = map[string]time.Duration{}, map[string]string{}
			}
			out.Overrides[r.Name], out.SetBy[r.Name] = periods[entry], entry
		}
	}
	return out, nil
}

// overridingEntry is the entry of periods whose quiet period reason gets,
// in the agent's order (pkg/agent/config, Config.Effective): its families'
// in registry order, then its own, the last one set winning.
func overridingEntry(reason string, periods map[string]time.Duration) (string, bool) {
	entry := ""
	for _, f := range health.FamiliesOf(reason) {
		if _, ok := periods[f]; ok && f != reason {
			entry = f
		}
	}
	if _, ok := periods[reason]; ok {
		entry = reason
	}
	return entry, entry != ""
}

// checkQuietOverride refuses what the agent refuses of one quietPeriod
// entry (its validateReasonOverride).
func checkQuietOverride(name string, d time.Duration) error {
	members, _ := health.Expand(name)
	if !slices.ContainsFunc(members, func(m string) bool {
		r, _ := health.LookupReason(m)
		return r.Source == health.FromLog
	}) {
		return fmt.Errorf("reasons.%s.quietPeriod: only log-derived reasons have a quiet period", name)
	}
	if d < health.MinQuietPeriod {
		return fmt.Errorf("reasons.%s.quietPeriod: %v is shorter than the %v floor", name, d, health.MinQuietPeriod)
	}
	return nil
}
