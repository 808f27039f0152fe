package cloudmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// azure reads Azure's Instance Metadata Service (learn.microsoft.com,
// virtual-machines/instance-metadata-service) and its Scheduled Events
// (virtual-machines/linux/scheduled-events): plain GETs under /metadata/
// with the header "Metadata: true" and a mandatory api-version query
// parameter. The service refuses a request without the header, and one
// with X-Forwarded-For, so a request relayed by a proxy never gets an
// answer; there is no token flow.
type azure struct {
	base   *url.URL
	client *http.Client

	mu   sync.Mutex
	name string // compute.name, read once: scheduled events name VMs by it
}

const (
	// The versions whose answers are parsed here: the instance document of
	// 2021-02-01 and the Scheduled Events of 2020-07-01 (the versions the
	// documentation's examples use).
	azureInstanceVersion = "2021-02-01"
	azureEventsVersion   = "2020-07-01"

	azureInstance = "metadata/instance"
	azureEvents   = "metadata/scheduledevents"
)

func newAzure(base *url.URL, c *http.Client) *azure { return &azure{base: base, client: c} }

func (a *azure) Cloud() string { return Azure }

func (a *azure) get(ctx context.Context, path, version string, extra url.Values) ([]byte, error) {
	u := a.base.JoinPath(path)
	q := url.Values{"api-version": {version}}
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata", "true")
	return do(a.client, req)
}

// azureSecretFields are left out of the instance document: user data and
// custom data (bootstrap scripts, AKS's with the kubelet's credentials; the
// service documents them as not returned, but an older or different host
// may), and the admin's SSH keys (as AWS's public-keys/).
var azureSecretFields = []string{"userData", "customData", "publicKeys"}

// Documents reads the instance document (compute: VM ID, name, size,
// location, zone, image, OS, scale set, priority, eviction policy, tags;
// network: interfaces and addresses) and the scheduled events document.
func (a *azure) Documents(ctx context.Context) ([]Document, error) {
	data, err := a.get(ctx, azureInstance, azureInstanceVersion, nil)
	if err != nil {
		return nil, notAzure(err)
	}
	inst, err := redactAzureInstance(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", azureInstance, err)
	}
	out := []Document{{Path: azureInstance, Data: inst}}
	var errs []error
	switch ev, err := a.get(ctx, azureEvents, azureEventsVersion, nil); {
	case errors.Is(err, errNotFound):
	case err != nil:
		errs = append(errs, fmt.Errorf("%s: %w", azureEvents, err))
	default:
		out = append(out, Document{Path: azureEvents, Data: ev})
	}
	return out, errors.Join(errs...)
}

// notAzure is the answer of a host with no Azure IMDS: nothing listens
// (ErrNoCloud already), or something answers but has no /metadata/instance.
func notAzure(err error) error {
	if errors.Is(err, errNotFound) {
		return fmt.Errorf("%w (no Azure instance metadata)", ErrNoCloud)
	}
	return err
}

// redactAzureInstance drops azureSecretFields from the compute section and
// reindents the document for a human.
func redactAzureInstance(data []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if compute, ok := doc["compute"].(map[string]any); ok {
		for _, f := range azureSecretFields {
			delete(compute, f)
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// vmName is the VM's compute.name, which Scheduled Events list in an
// event's Resources; "" when it cannot be read (then no event is left out).
func (a *azure) vmName(ctx context.Context) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.name != "" {
		return a.name
	}
	data, err := a.get(ctx, azureInstance+"/compute/name", azureInstanceVersion, url.Values{"format": {"text"}})
	if err == nil {
		a.name = strings.TrimSpace(string(data))
	}
	return a.name
}

// Events reads the scheduled events of this VM. The service is switched
// on for a VM by its first request, which it may take up to two minutes to
// answer (the documentation's "Enabling and disabling Scheduled Events");
// until then a request runs into the client's timeout and reads as no
// cloud, and a later check gets the events.
func (a *azure) Events(ctx context.Context) ([]Event, error) {
	data, err := a.get(ctx, azureEvents, azureEventsVersion, nil)
	if err != nil {
		return nil, notAzure(err)
	}
	return ParseAzureScheduledEvents(data, a.vmName(ctx))
}

// ParseAzureScheduledEvents reads a Scheduled Events document:
//
//	{"DocumentIncarnation": 2, "Events": [{"EventId": "…", "EventType": "Reboot",
//	  "ResourceType": "VirtualMachine", "Resources": ["vmName"], "EventStatus": "Scheduled",
//	  "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "…",
//	  "EventSource": "Platform", "DurationInSeconds": 9}]}
//
// An empty Events list is none. Events go to every VM of an availability
// set or scale set placement group; those whose Resources do not name vm
// (when vm is known) are another VM's and left out. Preempt (a spot VM
// evicted) is an Interruption; Reboot, Redeploy, Freeze and Terminate are
// Maintenance, with the event type lowercased as its code.
func ParseAzureScheduledEvents(data []byte, vm string) ([]Event, error) {
	var doc struct {
		DocumentIncarnation int
		Events              []struct {
			EventID           string `json:"EventId"`
			EventType         string
			ResourceType      string
			Resources         []string
			EventStatus       string
			NotBefore         string
			Description       string
			EventSource       string
			DurationInSeconds int
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("scheduled events: %w", err)
	}
	var out []Event
	for _, r := range doc.Events {
		if vm != "" && len(r.Resources) > 0 && !containsFold(r.Resources, vm) {
			continue
		}
		if r.EventType == "" {
			return nil, fmt.Errorf("scheduled event %q without an EventType", r.EventID)
		}
		ev := Event{Kind: Maintenance, ID: r.EventID, Code: strings.ToLower(r.EventType)}
		if r.EventType == "Preempt" {
			ev.Kind, ev.Code = Interruption, "preempt"
		}
		// NotBefore is empty once the event has started.
		ev.NotBefore, _ = time.Parse(time.RFC1123, r.NotBefore)
		if !ev.NotBefore.IsZero() && r.DurationInSeconds > 0 {
			ev.NotAfter = ev.NotBefore.Add(time.Duration(r.DurationInSeconds) * time.Second)
		}
		var parts []string
		for _, p := range []string{r.Description, r.EventStatus, r.EventSource} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		ev.Description = strings.Join(parts, "; ")
		if ev.Kind == Interruption && ev.Description == "" {
			ev.Description = "the spot VM is evicted"
		}
		out = append(out, ev)
	}
	return out, nil
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
