package controller_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"

	"nodemend.dev/nodemend/pkg/repair/record"
)

// A repair's steps as the API server sees them. The tests that stop a
// controller right after a step (crash_test.go, lateorder_test.go)
// recognise the step in the controller's own successful request, at its
// transport: the write that recorded it has happened, nothing after it
// has.
type step string

const (
	stepUnhealthyRecorded step = "UnhealthyRecorded"
	stepTainted           step = "Tainted"
	stepEvicted           step = "Evicted"
	stepHandedOver        step = "HandedOver"
	stepTargetDeleted     step = "TargetDeleted"
	stepRungDecided       step = "RungDecided"
	stepOrdered           step = "Ordered"
	stepRebootVerified    step = "RebootVerified"
	stepReturned          step = "Returned"
	stepQuarantined       step = "Quarantined"
)

var (
	nodePath      = regexp.MustCompile(`^/api/v1/nodes/([^/]+)$`)
	podPath       = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods/([^/]+?)(/eviction)?$`)
	targetPath    = regexp.MustCompile(`^/apis/(karpenter\.sh/v1/nodeclaims|cluster\.x-k8s\.io/v1beta2/namespaces/[^/]+/machines)/([^/]+)$`)
	orderNodeName = regexp.MustCompile(`"nodeName":"([^"]+)"`)
)

// stepOf names the step that a successful request of the controller
// recorded, and the node it is of (a pod's node is its name up to its last
// dash, as the tests name pods); "" for a request that records none.
func stepOf(method, path, body string) (node string, s step) {
	if m := nodePath.FindStringSubmatch(path); m != nil {
		node = m[1]
		switch {
		case method == http.MethodDelete:
			return node, stepTargetDeleted
		case method != http.MethodPatch:
			return "", ""
		case strings.Contains(body, recordPhase(record.PhaseDraining)):
			return node, stepTainted
		case strings.Contains(body, recordPhase(record.PhaseTerminating)):
			return node, stepHandedOver
		case strings.Contains(body, recordPhase(record.PhaseRemediating)) && strings.Contains(body, `verified`):
			return node, stepRebootVerified
		case strings.Contains(body, recordPhase(record.PhaseRemediating)):
			return node, stepRungDecided
		case strings.Contains(body, recordPhase(record.PhaseQuarantined)):
			return node, stepQuarantined
		case strings.Contains(body, `{\"version\":1,\"ladder\":{`):
			return node, stepReturned
		case strings.Contains(body, `unhealthySince`) && !strings.Contains(body, `\"phase\"`):
			return node, stepUnhealthyRecorded
		}
		return "", ""
	}
	if m := podPath.FindStringSubmatch(path); m != nil && (method == http.MethodDelete || method == http.MethodPost && m[2] != "") {
		if i := strings.LastIndex(m[1], "-"); i > 0 {
			return m[1][:i], stepEvicted
		}
		return "", ""
	}
	if m := targetPath.FindStringSubmatch(path); m != nil && method == http.MethodDelete {
		return m[2], stepTargetDeleted
	}
	if method == http.MethodPost && path == "/apis/nodemend.dev/v1alpha1/noderemediations" {
		if m := orderNodeName.FindStringSubmatch(body); m != nil {
			return m[1], stepOrdered
		}
	}
	return "", ""
}

// afterSteps is a controller's transport that runs after(node, step) once
// a request that records a step has succeeded, before its answer reaches
// the controller. While dead reports true, every request but the leader
// Lease's fails: a dead process sends nothing more. (The Lease is still
// released, to keep the tests short: a real crash leaves the standby
// waiting for the lease to expire.)
func afterSteps(rt http.RoundTripper, dead *atomic.Bool, after func(node string, s step)) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if dead.Load() && !strings.Contains(req.URL.Path, "/leases/") {
			return nil, errCrashed
		}
		var body []byte
		if req.Body != nil && req.Method != http.MethodGet {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode < 200 || resp.StatusCode >= 300 {
			return resp, err
		}
		if node, s := stepOf(req.Method, req.URL.Path, string(body)); s != "" {
			after(node, s)
		}
		return resp, err
	})
}
