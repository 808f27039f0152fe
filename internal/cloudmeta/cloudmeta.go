// Package cloudmeta reads a cloud's instance metadata service: the
// instance's identity and placement for diagnostic bundles, and the events
// the cloud schedules for the instance (maintenance, reboot, retirement,
// spot interruption) for the agent's checks.
//
// The metadata service is an unauthenticated HTTP endpoint on a link-local
// address that hands out credentials to whoever asks, so this package only
// ever asks for an allowlist of non-secret paths (never credentials, never
// user data), only on an address given as a literal IP that is link-local
// (or loopback, where tests and the simulation run AWS's metadata mock), with
// no proxy, no redirects, short timeouts and bounded answers. Which cloud is
// asked follows the Node's providerID (aws://, gce://, azure://) unless the
// agent is told; a node on no cloud that answers asks nothing. Done: AWS (EC2
// IMDS, IMDSv2), Google Compute Engine (its metadata server) and Azure (IMDS
// and its Scheduled Events). Other clouds' services are not read.
package cloudmeta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Clouds whose metadata services are implemented.
const (
	AWS   = "aws"
	GCE   = "gce"
	Azure = "azure"
)

// The selection values of Config.Cloud besides a cloud's name.
const (
	// Auto follows the Node's providerID.
	Auto = "auto"
	// None never asks a metadata service.
	None = "none"
)

// ErrNoCloud is returned by a provider that is not on a cloud that
// answers: the providerID names none that is implemented, the selection is
// "none", or the endpoint does not answer. Callers treat it as "nothing to
// read", not as a failure.
var ErrNoCloud = errors.New("not on a cloud that answers")

// Document is one piece of instance metadata, named by its path on the
// metadata service (e.g. "meta-data/instance-id").
type Document struct {
	Path string
	Data []byte
}

// EventKind says what a scheduled event does to the instance.
type EventKind string

// Event kinds.
const (
	// Maintenance is a scheduled reboot, retirement, stop or maintenance
	// window of the instance or its host.
	Maintenance EventKind = "maintenance"
	// Interruption is a spot (preemptible) instance being reclaimed.
	Interruption EventKind = "interruption"
)

// Event is an event the cloud scheduled for this instance.
type Event struct {
	Kind EventKind
	// ID identifies the event at the cloud (AWS: instance-event-…); empty
	// when the cloud gives none.
	ID string
	// Code is the cloud's kind of event (AWS: system-reboot,
	// instance-retirement, …; for an interruption the action: terminate,
	// stop, hibernate).
	Code        string
	Description string
	// NotBefore is the earliest start (for an interruption: when it
	// happens); NotAfter the latest end, zero when unknown.
	NotBefore time.Time
	NotAfter  time.Time
}

// Provider reads one cloud's metadata service.
type Provider interface {
	// Cloud is the cloud's name ("aws").
	Cloud() string
	// Documents returns the instance's metadata for a diagnostic bundle.
	Documents(ctx context.Context) ([]Document, error)
	// Events returns the events scheduled for the instance now; none is
	// an empty list.
	Events(ctx context.Context) ([]Event, error)
}

// CloudOf names the cloud of a Node's spec.providerID ("aws:///us-east-1a/i-…"
// → "aws"); "" when it names none that is implemented.
func CloudOf(providerID string) string {
	scheme, _, ok := strings.Cut(providerID, "://")
	if !ok {
		return ""
	}
	switch scheme {
	case "aws":
		return AWS
	case "gce":
		return GCE
	case "azure":
		// azure:///subscriptions/…/virtualMachines/NAME, and the scale
		// set's …/virtualMachineScaleSets/SET/virtualMachines/N.
		return Azure
	}
	return ""
}

// DefaultEndpoint is the cloud's metadata endpoint.
func DefaultEndpoint(cloud string) string {
	switch cloud {
	case AWS, GCE, Azure:
		// GCE's metadata.google.internal is this address too; a name
		// is never dialed. Azure's IMDS is this address (not the
		// wireserver, 168.63.129.16, which is no metadata service).
		return "http://169.254.169.254"
	}
	return ""
}

// Config selects and reaches a metadata service.
type Config struct {
	// Cloud is Auto (from the Node's providerID), None, or a cloud's name.
	Cloud string
	// Endpoint overrides the cloud's default endpoint: http://IP[:port],
	// the IP link-local or loopback.
	Endpoint string
	// Timeout bounds each request (default 2s).
	Timeout time.Duration
}

// Validate checks the selection and the endpoint.
func (c Config) Validate() error {
	switch c.Cloud {
	case "", Auto, None, AWS, GCE, Azure:
	default:
		return fmt.Errorf("cloud %q: want %s, %s, %s, %s or %s", c.Cloud, Auto, None, AWS, GCE, Azure)
	}
	if c.Endpoint != "" {
		if _, err := CheckEndpoint(c.Endpoint); err != nil {
			return err
		}
	}
	return nil
}

// CheckEndpoint accepts http://IP[:port] where IP is link-local (the
// metadata address of every cloud, 169.254.169.254), AWS's IPv6 metadata
// address fd00:ec2::254, or loopback (a metadata mock). A name is refused:
// DNS must not decide where a request that may return credentials goes.
func CheckEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata endpoint %q: %w", raw, err)
	}
	if u.Scheme != "http" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("metadata endpoint %q: want http://IP[:port]", raw)
	}
	ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]"))
	if err != nil {
		return nil, fmt.Errorf("metadata endpoint %q: the host must be an IP address, not a name", raw)
	}
	if !ip.IsLinkLocalUnicast() && !ip.IsLoopback() && ip != netip.MustParseAddr("fd00:ec2::254") {
		return nil, fmt.Errorf("metadata endpoint %q: %s is neither link-local nor loopback", raw, ip)
	}
	u.Path = ""
	return u, nil
}

// New returns the provider of cloud (a cloud's name) at endpoint (""
// for its default).
func New(cloud, endpoint string, timeout time.Duration) (Provider, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint(cloud)
	}
	switch cloud {
	case AWS:
		base, err := CheckEndpoint(endpoint)
		if err != nil {
			return nil, err
		}
		return newIMDS(base, newClient(timeout)), nil
	case GCE:
		base, err := CheckEndpoint(endpoint)
		if err != nil {
			return nil, err
		}
		return newGCE(base, newClient(timeout)), nil
	case Azure:
		base, err := CheckEndpoint(endpoint)
		if err != nil {
			return nil, err
		}
		return newAzure(base, newClient(timeout)), nil
	case None, "":
		return nil, ErrNoCloud
	}
	return nil, fmt.Errorf("no metadata service for cloud %q", cloud)
}

// Select returns the provider Config asks for. With Auto it is chosen on
// first use from the Node's providerID (read by providerID), so the agent
// can build it before it has read its Node.
func Select(c Config, providerID func(context.Context) (string, error)) (Provider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Cloud {
	case "", Auto:
		return &auto{cfg: c, providerID: providerID}, nil
	case None:
		return noCloud{}, nil
	}
	return New(c.Cloud, c.Endpoint, c.Timeout)
}

type noCloud struct{}

func (noCloud) Cloud() string                                 { return "" }
func (noCloud) Documents(context.Context) ([]Document, error) { return nil, ErrNoCloud }
func (noCloud) Events(context.Context) ([]Event, error)       { return nil, ErrNoCloud }

// auto resolves the provider from the providerID once it has been read.
type auto struct {
	cfg        Config
	providerID func(context.Context) (string, error)

	mu sync.Mutex
	p  Provider
}

func (a *auto) resolve(ctx context.Context) (Provider, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p != nil {
		return a.p, nil
	}
	id, err := a.providerID(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the Node's providerID: %w", err)
	}
	cloud := CloudOf(id)
	if cloud == "" {
		if id == "" {
			// The cloud controller manager may set it later.
			return nil, fmt.Errorf("%w (the Node has no providerID yet)", ErrNoCloud)
		}
		a.p = noCloud{}
		return a.p, nil
	}
	p, err := New(cloud, a.cfg.Endpoint, a.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	a.p = p
	return p, nil
}

func (a *auto) Cloud() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return ""
	}
	return a.p.Cloud()
}

func (a *auto) Documents(ctx context.Context) ([]Document, error) {
	p, err := a.resolve(ctx)
	if err != nil {
		return nil, err
	}
	return p.Documents(ctx)
}

func (a *auto) Events(ctx context.Context) ([]Event, error) {
	p, err := a.resolve(ctx)
	if err != nil {
		return nil, err
	}
	return p.Events(ctx)
}

// maxAnswer bounds one answer of a metadata service.
const maxAnswer = 1 << 20

// newClient is an HTTP client for a metadata service: no proxy (the
// request must go to the link-local address itself), no redirects, short
// timeouts.
func newClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: timeout}).DialContext,
			ResponseHeaderTimeout: timeout,
			MaxIdleConns:          1,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// errNotFound is a path the service does not have (for events: none).
var errNotFound = errors.New("not found")

// do sends req and returns the body of a 200 answer, bounded.
func do(c *http.Client, req *http.Request) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
			// No details: the address and the dial error are the story.
			return nil, fmt.Errorf("%w (nothing answered at %s)", ErrNoCloud, req.URL.Host)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNotFound
	case resp.StatusCode != http.StatusOK:
		return nil, &statusError{code: resp.StatusCode}
	case len(body) > maxAnswer:
		return nil, fmt.Errorf("%s: answer longer than %d bytes", req.URL.Path, maxAnswer)
	}
	return body, nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("metadata service answered %d", e.code) }
