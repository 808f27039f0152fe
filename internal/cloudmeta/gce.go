package cloudmeta

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// gce reads Google Compute Engine's metadata server: plain GETs under
// /computeMetadata/v1/ with the header "Metadata-Flavor: Google" (which the
// server requires, and echoes in its answers). No token flow: the header
// is what a request forwarded by a proxy would not carry.
type gce struct {
	base   *url.URL
	client *http.Client
}

const gceFlavor = "Google"

func newGCE(base *url.URL, c *http.Client) *gce { return &gce{base: base, client: c} }

func (g *gce) Cloud() string { return GCE }

// gceDocuments are the instance's identity, placement, image, network
// interfaces, scheduling and maintenance state. Never attributes/ (user
// metadata: startup scripts, GKE's kube-env with its credentials) or
// service-accounts/ (tokens).
func gceDocuments() []string {
	return []string{
		"instance/id", "instance/name", "instance/hostname", "instance/machine-type", "instance/zone", "instance/image",
		"instance/cpu-platform", "instance/network-interfaces/?recursive=true&alt=json",
		"instance/scheduling/?recursive=true&alt=json", "instance/maintenance-event", "instance/preempted",
		"project/project-id",
	}
}

func (g *gce) get(ctx context.Context, path string) ([]byte, error) {
	p, q, _ := strings.Cut(path, "?")
	u := g.base.JoinPath("computeMetadata/v1", p)
	if strings.HasSuffix(p, "/") && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawQuery = q
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata-Flavor", gceFlavor)
	return do(g.client, req)
}

func (g *gce) Documents(ctx context.Context) ([]Document, error) {
	var out []Document
	var errs []error
	for i, p := range gceDocuments() {
		data, err := g.get(ctx, p)
		switch {
		case errors.Is(err, ErrNoCloud) && i == 0:
			return nil, err // nobody there
		case errors.Is(err, errNotFound) && i == 0:
			// Every GCE instance has an ID: this is a web server,
			// not GCE's metadata server.
			return nil, fmt.Errorf("%w (no GCE instance metadata)", ErrNoCloud)
		case errors.Is(err, errNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		default:
			name, _, _ := strings.Cut(p, "?")
			out = append(out, Document{Path: strings.TrimSuffix(name, "/"), Data: data})
		}
	}
	return out, errors.Join(errs...)
}

// Events reads instance/maintenance-event (NONE, or the host maintenance
// about to happen: MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE)
// and instance/preempted (TRUE once a spot or preemptible VM is being
// reclaimed).
func (g *gce) Events(ctx context.Context) ([]Event, error) {
	var evs []Event
	m, err := g.get(ctx, "instance/maintenance-event")
	if err != nil && !errors.Is(err, errNotFound) {
		return nil, err
	}
	if ev, ok := ParseGCEMaintenance(m); ok {
		evs = append(evs, ev)
	}
	p, err := g.get(ctx, "instance/preempted")
	if err != nil && !errors.Is(err, errNotFound) {
		return nil, err
	}
	if strings.TrimSpace(string(p)) == "TRUE" {
		evs = append(evs, Event{Kind: Interruption, Code: "terminate", NotBefore: time.Now(),
			Description: "the preemptible or spot VM is being preempted"})
	}
	return evs, nil
}

// ParseGCEMaintenance reads instance/maintenance-event.
func ParseGCEMaintenance(data []byte) (Event, bool) {
	v := strings.TrimSpace(string(data))
	if v == "" || v == "NONE" {
		return Event{}, false
	}
	return Event{Kind: Maintenance, Code: strings.ToLower(strings.ReplaceAll(v, "_", "-")),
		Description: "the host of this VM goes into maintenance (" + v + ")"}, true
}
