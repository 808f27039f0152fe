package containerruntime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	introspection "github.com/containerd/containerd/api/services/introspection/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- DeprecatedContainerdConfiguration --------------------------------------
//
// containerd (1.7.7+ and 2.x) records each deprecated feature it sees, with
// the time it last did, and serves them in its introspection API
// (Introspection.Server, what `ctr deprecations list` prints): pulling a
// Docker manifest v2 schema 1 image, CRI registry mirrors/auths/configs in
// its config, v1 runtimes, ... A deprecation stays listed after its last
// use; only those used within deprecationWindow count.

// deprecationWindow is how recent a deprecation's last use must be.
const deprecationWindow = time.Hour

// deprecation is one warning of the introspection API.
type deprecation struct {
	ID, Message string
	Last        time.Time
}

// errNoIntrospection is returned when the runtime behind the socket is not
// containerd (CRI-O answers Unimplemented): the check does not apply.
var errNoIntrospection = errors.New("the runtime serves no containerd introspection API")

// deprecations asks containerd for its deprecation warnings.
func (c *criClient) deprecations(ctx context.Context) ([]deprecation, error) {
	var out []deprecation
	err := c.callConn(ctx, "Introspection.Server", func(ctx context.Context, conn *grpc.ClientConn) error {
		resp, err := introspection.NewIntrospectionClient(conn).Server(ctx, &emptypb.Empty{})
		if err != nil {
			if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
				return errNoIntrospection
			}
			return err
		}
		for _, d := range resp.GetDeprecations() {
			out = append(out, deprecation{ID: d.GetID(), Message: d.GetMessage(), Last: d.GetLastOccurrence().AsTime()})
		}
		return nil
	})
	return out, err
}

func (m *Monitor) checkDeprecations(ctx context.Context) ([]detection.Finding, error) {
	if present, _ := m.socketPresent(); !present {
		return nil, nil // no runtime here: nothing deprecated to report
	}
	ds, err := m.cri.deprecations(ctx)
	if errors.Is(err, errNoIntrospection) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return evalDeprecations(ds, m.clock.Now()), nil
}

// evalDeprecations reports each deprecated feature containerd saw within
// the window, one finding per deprecation ID.
func evalDeprecations(ds []deprecation, now time.Time) []detection.Finding {
	var fs []detection.Finding
	for _, d := range ds {
		if d.Last.IsZero() || now.Sub(d.Last) > deprecationWindow || d.Last.After(now.Add(deprecationWindow)) {
			continue
		}
		msg := strings.Join(strings.Fields(d.Message), " ")
		fs = append(fs, detection.Finding{
			Reason: health.ReasonDeprecatedContainerdConfiguration,
			Message: fmt.Sprintf("containerd used a deprecated feature at %s: %s (%s); a later containerd release removes it",
				d.Last.UTC().Format(time.RFC3339), msg, d.ID),
			Observed: now,
			Subject:  d.ID,
		})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Subject < fs[j].Subject })
	return fs
}
