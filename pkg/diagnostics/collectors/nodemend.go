package collectors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
	"nodemend.dev/nodemend/pkg/health"
)

const catNodemend = "nodemend"

func nodemend(e *Env) []collect.Collector {
	return []collect.Collector{
		{Name: "nodemend/findings", Category: catNodemend, Run: e.findings},
		{Name: "nodemend/config", Category: catNodemend, Run: func(_ context.Context, out *collect.Output) error {
			if e.EffectiveConfig == nil {
				return collect.Skip("no agent config")
			}
			data, err := redactedConfig(e.EffectiveConfig(), redact.New())
			if err != nil {
				return err
			}
			// Written through the text redactor too, like every entry.
			return out.WriteFile("effective-config.yaml", data)
		}},
		{Name: "nodemend/metrics", Category: catNodemend, Run: func(_ context.Context, out *collect.Output) error {
			if e.Gatherer == nil {
				return collect.Skip("no metrics registry")
			}
			mfs, err := e.Gatherer.Gather()
			if err != nil && len(mfs) == 0 {
				return err
			}
			var b bytes.Buffer
			enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
			for _, mf := range mfs {
				if err := enc.Encode(mf); err != nil {
					return err
				}
			}
			return out.WriteFile("metrics.txt", b.Bytes())
		}},
	}
}

// redactedConfig renders the agent's config as YAML with every value judged
// by its field's name first (structured, so no folding or quoting of the
// YAML can hide a secret from the text redactor), then as text.
func redactedConfig(cfg any, r *redact.Redactor) ([]byte, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return yaml.Marshal(redactValue(r, nil, v))
}

func redactValue(r *redact.Redactor, path []string, v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			t[k] = redactValue(r, append(path[:len(path):len(path)], k), c)
		}
	case []any:
		for i, c := range t {
			t[i] = redactValue(r, path, c)
		}
	case string:
		return r.Field(path, t)
	case json.Number:
		if s := r.Field(path, t.String()); s != t.String() {
			return s
		}
	case bool:
		if r.Field(path, strconv.FormatBool(t)) == redact.Mask {
			return redact.Mask
		}
	}
	return v
}

// findings writes what nodemend currently says about the node: its
// conditions (nodemend's and the kubelet's) and the recent events on it.
func (e *Env) findings(ctx context.Context, out *collect.Output) error {
	if e.Client == nil {
		return collect.Skip("no API client")
	}
	node, err := e.Client.GetNode(ctx, e.NodeName)
	if err != nil {
		return err
	}
	type cond struct {
		corev1.NodeCondition `json:",inline"`
		Owner                string `json:"owner"`
	}
	var conds []cond
	for _, c := range node.Status.Conditions {
		owner := "kubelet"
		if health.IsOwned(string(c.Type)) {
			owner = "nodemend"
		}
		conds = append(conds, cond{c, owner})
	}
	var errs []error
	// Events about a Node, a cluster-scoped object, are recorded in the
	// default namespace (client-go's recorders put them there), so the
	// agent's RBAC grants event reads in that namespace only.
	evs, err := e.Client.ListEvents(ctx, metav1.NamespaceDefault, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Node"),
			fields.OneTermEqualSelector("involvedObject.name", e.NodeName)).String(),
	})
	type event struct {
		Last    time.Time `json:"last"`
		Type    string    `json:"type"`
		Reason  string    `json:"reason"`
		Source  string    `json:"source"`
		Count   int32     `json:"count"`
		Message string    `json:"message"`
	}
	var events []event
	if err != nil {
		errs = append(errs, fmt.Errorf("listing events: %w", err))
	} else {
		for _, ev := range evs.Items {
			last := ev.LastTimestamp.Time
			if last.IsZero() {
				last = ev.EventTime.Time
			}
			events = append(events, event{Last: last, Type: ev.Type, Reason: ev.Reason, Source: ev.Source.Component, Count: ev.Count, Message: ev.Message})
		}
		sort.Slice(events, func(i, j int) bool { return events[i].Last.Before(events[j].Last) })
	}
	data, err := yaml.Marshal(map[string]any{"node": e.NodeName, "conditions": conds, "events": events})
	if err != nil {
		return err
	}
	if err := out.WriteFile("findings.yaml", data); err != nil {
		return err
	}
	return errors.Join(errs...)
}
