package deploytest

import (
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// ForbiddenLog records every request the API server refused with 403, so a
// test can run a real component with its own credentials and prove that
// nothing it does is denied (its RBAC is sufficient) — the counterpart of
// the SelfSubjectAccessReview tables (its RBAC is no larger than needed).
type ForbiddenLog struct {
	mu   sync.Mutex
	reqs []string
}

// Wrap returns a copy of cfg whose requests are watched.
func (f *ForbiddenLog) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				f.mu.Lock()
				f.reqs = append(f.reqs, fmt.Sprintf("%s %s", r.Method, r.URL.RequestURI()))
				f.mu.Unlock()
			}
			return resp, err
		})
	})
	return cfg
}

// List returns the refused requests, "METHOD URI" each.
func (f *ForbiddenLog) List() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
