package cloudmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// imds reads Amazon EC2's Instance Metadata Service with IMDSv2: a session
// token from PUT /latest/api/token (its lifetime in the
// X-aws-ec2-metadata-token-ttl-seconds header), then GETs that carry it in
// X-aws-ec2-metadata-token. Only IMDSv2 is spoken: an instance that
// requires it (the default of current AMIs and EKS node groups) refuses
// IMDSv1, and the PUT's hop limit keeps the answer from reaching pods that
// are not on the host network.
type imds struct {
	base   *url.URL
	client *http.Client

	mu      sync.Mutex
	token   string
	expires time.Time
}

const (
	imdsTokenTTL     = 6 * time.Hour
	imdsTokenHeader  = "X-aws-ec2-metadata-token"
	imdsTTLHeader    = "X-aws-ec2-metadata-token-ttl-seconds"
	imdsScheduled    = "latest/meta-data/events/maintenance/scheduled"
	imdsSpotAction   = "latest/meta-data/spot/instance-action"
	imdsInterfaceDir = "latest/meta-data/network/interfaces/macs/"
	// imdsEventTime is how IMDS writes the times of scheduled events:
	// "21 Jan 2019 09:00:43 GMT".
	imdsEventTime = "2 Jan 2006 15:04:05 GMT"
)

func newIMDS(base *url.URL, c *http.Client) *imds { return &imds{base: base, client: c} }

func (m *imds) Cloud() string { return AWS }

// imdsDocuments are the paths a bundle holds: identity, placement, image,
// lifecycle and the events. Never iam/ (credentials), identity-credentials/,
// user-data (bootstrap secrets) or public-keys/.
func imdsDocuments() []string {
	return []string{
		"latest/dynamic/instance-identity/document",
		"latest/meta-data/instance-id",
		"latest/meta-data/instance-type",
		"latest/meta-data/ami-id",
		"latest/meta-data/instance-life-cycle",
		"latest/meta-data/hostname",
		"latest/meta-data/local-hostname",
		"latest/meta-data/local-ipv4",
		"latest/meta-data/mac",
		"latest/meta-data/placement/region",
		"latest/meta-data/placement/availability-zone",
		"latest/meta-data/placement/availability-zone-id",
		"latest/meta-data/placement/group-name",
		"latest/meta-data/placement/partition-number",
		"latest/meta-data/services/partition",
		"latest/meta-data/autoscaling/target-lifecycle-state",
		imdsScheduled,
		imdsSpotAction,
		"latest/meta-data/events/recommendations/rebalance",
	}
}

// imdsInterfaceItems are read for every network interface (by MAC).
func imdsInterfaceItems() []string {
	return []string{"device-number", "network-card-index", "interface-id", "subnet-id", "subnet-ipv4-cidr-block", "vpc-id",
		"vpc-ipv4-cidr-blocks", "security-group-ids", "local-ipv4s", "ipv4-prefix", "ipv6s", "ipv6-prefix"}
}

var macPattern = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)

// Documents reads the allowlisted paths; a path the instance does not
// have (404) is left out.
func (m *imds) Documents(ctx context.Context) ([]Document, error) {
	var out []Document
	var errs []error
	get := func(p string) []byte {
		data, err := m.get(ctx, p)
		switch {
		case errors.Is(err, errNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		default:
			out = append(out, Document{Path: strings.TrimPrefix(p, "latest/"), Data: data})
		}
		return data
	}
	// The first answer tells whether anyone is there.
	if _, err := m.session(ctx); err != nil {
		return nil, err
	}
	for _, p := range imdsDocuments() {
		get(p)
	}
	if macs := get(imdsInterfaceDir); macs != nil {
		for _, line := range strings.Split(string(macs), "\n") {
			mac := strings.TrimSuffix(strings.TrimSpace(line), "/")
			if !macPattern.MatchString(mac) {
				continue // an answer that is no MAC never becomes a path
			}
			for _, item := range imdsInterfaceItems() {
				get(imdsInterfaceDir + mac + "/" + item)
			}
		}
	}
	return out, errors.Join(errs...)
}

// Events reads the scheduled maintenance events and the spot interruption
// notice.
func (m *imds) Events(ctx context.Context) ([]Event, error) {
	var events []Event
	data, err := m.get(ctx, imdsScheduled)
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return nil, err
	default:
		evs, err := ParseIMDSScheduled(data)
		if err != nil {
			return nil, err
		}
		events = append(events, evs...)
	}
	data, err = m.get(ctx, imdsSpotAction)
	switch {
	case errors.Is(err, errNotFound): // no interruption: IMDS answers 404
	case err != nil:
		return nil, err
	default:
		ev, err := ParseIMDSSpotAction(data)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// ParseIMDSScheduled reads meta-data/events/maintenance/scheduled: a JSON
// list of {Code, Description, EventId, State, NotBefore, NotAfter,
// NotBeforeDeadline}. Completed and canceled events (State, or a
// "[Completed]"/"[Canceled]" description) are left out.
func ParseIMDSScheduled(data []byte) ([]Event, error) {
	var raw []struct {
		Code        string
		Description string
		EventID     string `json:"EventId"`
		State       string
		NotBefore   string
		NotAfter    string
	}
	if s := strings.TrimSpace(string(data)); s == "" {
		return nil, nil
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("scheduled events: %w", err)
	}
	var out []Event
	for _, r := range raw {
		state := strings.ToLower(r.State)
		if state == "completed" || state == "canceled" || strings.HasPrefix(r.Description, "[Completed]") || strings.HasPrefix(r.Description, "[Canceled]") {
			continue
		}
		ev := Event{Kind: Maintenance, ID: r.EventID, Code: r.Code, Description: r.Description}
		ev.NotBefore, _ = time.Parse(imdsEventTime, r.NotBefore)
		ev.NotAfter, _ = time.Parse(imdsEventTime, r.NotAfter)
		out = append(out, ev)
	}
	return out, nil
}

// ParseIMDSSpotAction reads meta-data/spot/instance-action:
// {"action": "terminate"|"stop"|"hibernate", "time": RFC 3339}.
func ParseIMDSSpotAction(data []byte) (Event, error) {
	var raw struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Event{}, fmt.Errorf("spot instance-action: %w", err)
	}
	if raw.Action == "" {
		return Event{}, fmt.Errorf("spot instance-action without an action")
	}
	t, err := time.Parse(time.RFC3339, raw.Time)
	if err != nil {
		return Event{}, fmt.Errorf("spot instance-action time %q: %w", raw.Time, err)
	}
	return Event{Kind: Interruption, Code: raw.Action, NotBefore: t,
		Description: "the spot instance is interrupted: " + raw.Action}, nil
}

// session returns a valid token, asking for a new one when it is about to
// expire.
func (m *imds) session(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.token != "" && time.Until(m.expires) > time.Minute {
		return m.token, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, m.base.JoinPath("latest/api/token").String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(imdsTTLHeader, fmt.Sprint(int(imdsTokenTTL.Seconds())))
	body, err := do(m.client, req)
	if err != nil {
		if errors.Is(err, errNotFound) {
			return "", fmt.Errorf("%w: no IMDSv2 token service at %s", ErrNoCloud, m.base.Host)
		}
		if errors.Is(err, ErrNoCloud) {
			return "", err
		}
		return "", fmt.Errorf("asking IMDS for a session (IMDSv2): %w", err)
	}
	tok := strings.TrimSpace(string(body))
	if tok == "" || len(tok) > 1024 {
		return "", fmt.Errorf("IMDS gave an unusable IMDSv2 answer")
	}
	m.token, m.expires = tok, time.Now().Add(imdsTokenTTL)
	return tok, nil
}

func (m *imds) forget() {
	m.mu.Lock()
	m.token = ""
	m.mu.Unlock()
}

// get reads one path with the session token; a 401 (the token expired or
// the service restarted) asks for a new token once.
func (m *imds) get(ctx context.Context, path string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		tok, err := m.session(ctx)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base.JoinPath(path).String(), nil)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(path, "/") && !strings.HasSuffix(req.URL.Path, "/") {
			req.URL.Path += "/"
		}
		req.Header.Set(imdsTokenHeader, tok)
		data, err := do(m.client, req)
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusUnauthorized && attempt == 0 {
			m.forget()
			continue
		}
		return data, err
	}
}
