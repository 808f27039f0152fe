package agent

import (
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/apigate"
	"nodemend.dev/nodemend/internal/coreclient"
)

// Clients are the agent's clients of its API server, every one behind the
// same apigate.Gate: through an outage the agent sends one request at a
// time, whatever kind (status, events, the pods', NodeDiagnostics' and
// NodeRemediations' lists and watches, their status writes), paced by one
// jittered backoff, and sends everything that waited as soon as the
// server answers (docs/agent.md, "API outages").
type Clients struct {
	// Client and Status are Options.Client and Options.StatusClient.
	Client, Status *coreclient.Client
	// Config is the gated REST config for DiagnosticsOptions.Config and
	// RemediationOptions.Config.
	Config *rest.Config
	Gate   *apigate.Gate
}

// Connect builds the agent's Clients from cfg (not changed) behind a new
// gate on clk (nil: the real clock) that logs when the server stops and
// starts answering.
func Connect(cfg *rest.Config, clk clock.Clock, log logr.Logger) (Clients, error) {
	g := apigate.New(apigate.Options{Clock: clk, OnChange: func(down bool, err error) {
		if down {
			log.Error(err, "the API server is not answering; holding requests, one probe at a time", "maxDelay", apigate.DefaultMax)
			return
		}
		log.Info("the API server answers again; sending what waited")
	}})
	gated := g.Config(cfg)
	client, err := coreclient.New(gated)
	if err != nil {
		return Clients{}, err
	}
	// The conditions have a client of their own: a flood of warnings
	// (Events) must not queue a fault's condition behind its rate limit.
	status, err := coreclient.New(gated)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Client: client, Status: status, Config: gated, Gate: g}, nil
}
