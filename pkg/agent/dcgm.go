package agent

import (
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// dcgmSource is the DCGM source of one set of settings.
type dcgmSource struct {
	cfg    dcgm.Config
	client *dcgm.Client
	src    *dcgm.Source
}

// dcgmSource returns the DCGM source for c, the current one while the
// settings that reach dcgmi do not change: a config reload must not make the
// agent forget that a host engine answered (and so stop reporting its loss).
// Mode off returns nil.
func (a *Agent) dcgmSource(c dcgm.Config) *dcgm.Source {
	a.dcgmMu.Lock()
	defer a.dcgmMu.Unlock()
	if c.Mode == dcgm.Off {
		a.dcgm = nil
		return nil
	}
	if cur := a.dcgm; cur != nil && cur.cfg.Mode == c.Mode && cur.cfg.Dcgmi == c.Dcgmi && cur.cfg.HostEngine == c.HostEngine {
		return cur.src
	}
	client := &dcgm.Client{Runner: a.opts.Commands, Dcgmi: c.Dcgmi, HostEngine: c.HostEngine}
	a.dcgm = &dcgmSource{cfg: c, client: client, src: dcgm.NewSource(client, c.Mode, a.opts.Log.WithName("dcgm"))}
	return a.dcgm.src
}

// dcgmClient is the dcgmi client of the config in force, for diagnostics;
// nil when DCGM is off (or before the first config).
func (a *Agent) dcgmClient() *dcgm.Client {
	a.dcgmMu.Lock()
	defer a.dcgmMu.Unlock()
	if a.dcgm == nil {
		return nil
	}
	return a.dcgm.client
}
