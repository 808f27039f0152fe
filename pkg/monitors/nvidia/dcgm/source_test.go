package dcgm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// What dcgmi prints (dcgmi/Command.cpp) when no host engine listens.
const unreachable = "Error: unable to establish a connection to the specified host: localhost\n" +
	"Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"

// dcgmi/Health.cpp CheckWatches on a group without watches.
const watchesOff = "Error: Health watches not enabled. Please enable watches. \n"

var exitFailure = errors.New("exit status 1")

func fixture(t *testing.T, parts ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

type logLines struct{ lines []string }

func (l *logLines) logger() func(prefix, args string) {
	return func(prefix, args string) { l.lines = append(l.lines, args) }
}

func newSource(t *testing.T, script *command.Script, mode dcgm.Mode) (*dcgm.Source, *logLines) {
	t.Helper()
	logs := &logLines{}
	log := funcr.New(logs.logger(), funcr.Options{Verbosity: 1})
	return dcgm.NewSource(&dcgm.Client{Runner: script}, mode, log), logs
}

func reasons(fs []dcgm.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Reason+"@"+f.Subject+"="+string(f.Severity))
	}
	slices.Sort(out)
	return out
}

func TestNoDCGMWritesNothing(t *testing.T) {
	ctx := context.Background()
	for name, script := range map[string]*command.Script{
		"no dcgmi":       command.NewScript(),
		"no host engine": command.NewScript().Set("dcgmi *", command.Result{Stdout: unreachable, Err: exitFailure}),
	} {
		t.Run(name, func(t *testing.T) {
			src, logs := newSource(t, script, dcgm.Auto)
			for range 3 {
				fs, err := src.CheckHealth(ctx)
				if err != nil || fs != nil {
					t.Fatalf("health: %v, %v", fs, err)
				}
				fs, err = src.CheckFields(ctx)
				if err != nil || fs != nil {
					t.Fatalf("fields: %v, %v", fs, err)
				}
			}
			if src.Present() {
				t.Error("present")
			}
			if len(logs.lines) != 1 || !strings.Contains(logs.lines[0], "DCGM not in use on this node") {
				t.Errorf("want one debug line saying DCGM is not used, got %q", logs.lines)
			}
			for _, c := range script.Calls() {
				if strings.Contains(c, "dmon") {
					t.Errorf("%q run without a host engine", c)
				}
			}
		})
	}
}

func TestRequiredWithoutDCGMIsDCGMError(t *testing.T) {
	src, _ := newSource(t, command.NewScript(), dcgm.Required)
	fs, err := src.CheckHealth(context.Background())
	if err != nil || len(fs) != 1 || fs[0].Reason != health.ReasonDCGMError || fs[0].Severity != health.Fatal {
		t.Fatalf("%+v, %v", fs, err)
	}
	if !strings.Contains(fs[0].Message, "dcgmi is not installed") {
		t.Errorf("message %q", fs[0].Message)
	}
}

// The life of a node with DCGM: watches are set on first contact, failures
// are reported, recover, the engine goes away (DCGMError) and comes back
// having forgotten the watches.
func TestHealthLifecycle(t *testing.T) {
	ctx := context.Background()
	script := command.NewScript().
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"}).
		Set("dcgmi health --check --json", command.Result{Stdout: fixture(t, "health", "pass.json")}).
		Set("dcgmi dmon --field-id 112 --count 1", command.Result{Stdout: fixture(t, "dmon", "clocks.txt")})
	src, _ := newSource(t, script, dcgm.Auto)

	// First contact: the watches are set, nothing is read yet.
	if fs, err := src.CheckHealth(ctx); err != nil || fs != nil {
		t.Fatalf("first check: %v, %v", fs, err)
	}
	if !src.Present() || !slices.Contains(script.Calls(), "dcgmi health --set a") {
		t.Fatalf("watches not set: %q", script.Calls())
	}
	if fs, err := src.CheckHealth(ctx); err != nil || len(fs) != 0 {
		t.Fatalf("healthy: %v, %v", fs, err)
	}
	fs, err := src.CheckFields(ctx)
	if err != nil || len(fs) != 3 {
		t.Fatalf("fields: %v, %v", fs, err)
	}

	script.Set("dcgmi health --check --json", command.Result{Stdout: fixture(t, "health", "all-fail.json"), Err: exitFailure})
	fs, err = src.CheckHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := reasons(fs); !slices.Contains(got, "DCGMHealthCode120@GPU 0=Fatal") {
		t.Fatalf("fallen off the bus not reported: %v", got)
	}

	// The engine goes away: DCGMError, and nothing else is claimed.
	script.Set("dcgmi health --check --json", command.Result{Stdout: unreachable, Err: exitFailure}).
		Set("dcgmi health --set a", command.Result{Stdout: unreachable, Err: exitFailure})
	fs, err = src.CheckHealth(ctx)
	if err != nil || len(fs) != 1 || fs[0].Reason != health.ReasonDCGMError || !strings.Contains(fs[0].Message, "answered earlier") {
		t.Fatalf("lost engine: %+v, %v", fs, err)
	}
	if fs, err := src.CheckFields(ctx); fs != nil || err != nil {
		t.Fatalf("fields while lost: %v, %v", fs, err)
	}

	// It comes back, restarted, without watches: they are set again.
	script.Set("dcgmi health --check --json", command.Result{Stdout: watchesOff, Err: exitFailure}).
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"})
	before := len(script.Calls())
	if fs, err := src.CheckHealth(ctx); err != nil || fs != nil {
		t.Fatalf("back: %v, %v", fs, err)
	}
	if calls := script.Calls()[before:]; !slices.Contains(calls, "dcgmi health --set a") {
		t.Fatalf("watches not set again: %q", calls)
	}
	script.Set("dcgmi health --check --json", command.Result{Stdout: fixture(t, "health", "pass.json")})
	if fs, err := src.CheckHealth(ctx); err != nil || len(fs) != 0 {
		t.Fatalf("recovered: %v, %v", fs, err)
	}
}

func TestUnreadableOutputKeepsState(t *testing.T) {
	ctx := context.Background()
	script := command.NewScript().
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"}).
		Set("dcgmi health --check --json", command.Result{Stdout: "Error: Unable to check health watches. Return: Generic unspecified error\n", Err: exitFailure})
	src, _ := newSource(t, script, dcgm.Auto)
	_, _ = src.CheckHealth(ctx)
	if _, err := src.CheckHealth(ctx); err == nil || !strings.Contains(err.Error(), "Unable to check health watches") {
		t.Fatalf("want an error naming dcgmi's complaint, got %v", err)
	}
}

func TestHostEngineAddressAndTimeout(t *testing.T) {
	script := command.NewScript().
		Set("dcgmi diag --run 2 --json --timeout 600 --host unix:///run/nvidia/dcgm.sock", command.Result{Stdout: fixture(t, "diag", "level2-fail.json"), Err: exitFailure})
	c := &dcgm.Client{Runner: script, HostEngine: "unix:///run/nvidia/dcgm.sock"}
	r, raw, err := c.Diag(context.Background(), 2, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Failed()) != 3 || len(raw) == 0 {
		t.Errorf("report %+v", r)
	}
	if _, _, err := c.Diag(context.Background(), 5, 0); err == nil {
		t.Error("level 5 accepted")
	}
	if _, _, err := (&dcgm.Client{Runner: command.NewScript()}).Diag(context.Background(), 1, 0); !errors.Is(err, dcgm.ErrNotInstalled) {
		t.Errorf("no dcgmi: %v", err)
	}
}

func TestOutputIsBounded(t *testing.T) {
	huge := strings.Repeat("x", 5<<20)
	script := command.NewScript().Set("dcgmi health --check --json", command.Result{Stdout: huge})
	_, err := (&dcgm.Client{Runner: script}).Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "printed more than") {
		t.Fatalf("got %v", err)
	}
}

// dcgmiFrom picks whose dcgmi runs: auto prefers the agent's and falls back
// to the host's, agent and host use only theirs.
func TestWhoseDcgmi(t *testing.T) {
	ctx := context.Background()
	pass := command.Result{Stdout: fixture(t, "health", "pass.json")}
	agentTool := func() *command.Script { return command.NewScript().Set("dcgmi health --check --json", pass) }
	for name, c := range map[string]struct {
		from             dcgm.ToolFrom
		agent, host      *command.Script
		want             string // "agent", "host" or "" (ErrNotInstalled)
		wantTool         string
		wantMessageParts []string
	}{
		"auto, both":           {from: dcgm.FromAuto, agent: agentTool(), host: agentTool(), want: "agent", wantTool: "dcgmi"},
		"auto, only the host":  {from: dcgm.FromAuto, agent: command.NewScript(), host: agentTool(), want: "host", wantTool: "the host's dcgmi"},
		"empty is auto":        {from: "", agent: command.NewScript(), host: agentTool(), want: "host", wantTool: "the host's dcgmi"},
		"agent, only the host": {from: dcgm.FromAgent, agent: command.NewScript(), host: agentTool(), wantMessageParts: []string{"the agent's: "}},
		"host, both":           {from: dcgm.FromHost, agent: agentTool(), host: agentTool(), want: "host", wantTool: "the host's dcgmi"},
		"host, only the agent": {from: dcgm.FromHost, agent: agentTool(), host: command.NewScript(), wantMessageParts: []string{"the host's: "}},
		"neither":              {from: dcgm.FromAuto, agent: command.NewScript(), host: command.NewScript(), wantMessageParts: []string{"the agent's: ", "; the host's: "}},
	} {
		t.Run(name, func(t *testing.T) {
			cl := &dcgm.Client{Runner: c.agent, HostRunner: c.host, From: c.from}
			_, err := cl.Health(ctx)
			if c.want == "" {
				if !errors.Is(err, dcgm.ErrNotInstalled) {
					t.Fatalf("Health = %v, want ErrNotInstalled", err)
				}
				for _, p := range c.wantMessageParts {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("error %q does not say %q", err, p)
					}
				}
				if len(c.agent.Calls())+len(c.host.Calls()) != 0 {
					t.Errorf("ran %v %v", c.agent.Calls(), c.host.Calls())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ran := map[string]int{"agent": len(c.agent.Calls()), "host": len(c.host.Calls())}
			if ran[c.want] != 1 || ran["agent"]+ran["host"] != 1 {
				t.Errorf("ran %v, want one call by the %s's runner", ran, c.want)
			}
			if got := cl.Tool(); got != c.wantTool {
				t.Errorf("Tool() = %q, want %q", got, c.wantTool)
			}
		})
	}
}

// A host dcgmi that others can write is not run: it is ErrNotInstalled and
// ErrRefused, the source writes nothing for it in mode auto, and its check
// fails with the refusal every time (the agent reports a failing check
// once, with an UntrustedHostTool event, until it passes).
func TestRefusedHostDcgmi(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/dcgmi"), []byte("#!/bin/sh\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "usr/bin/dcgmi"), 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	cl := &dcgm.Client{Runner: command.NewScript(), HostRunner: command.Exec{Root: root}}
	err := cl.Installed()
	if !errors.Is(err, dcgm.ErrNotInstalled) || !errors.Is(err, dcgm.ErrRefused) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("Installed = %v", err)
	}
	src := dcgm.NewSource(cl, dcgm.Auto, logr.Discard())
	for range 2 {
		if fs, err := src.CheckHealth(context.Background()); !errors.Is(err, dcgm.ErrRefused) || len(fs) != 0 {
			t.Fatalf("CheckHealth = %v, %v; want no finding and the refusal", fs, err)
		}
	}
}
