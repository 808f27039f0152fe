package dcgm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/textcut"
)

// Errors of the client. A node without DCGM gets ErrNotInstalled or
// ErrUnreachable; neither is a fault of the node by itself.
var (
	// ErrNotInstalled: the dcgmi tool is not there.
	ErrNotInstalled = errors.New("dcgmi is not installed")
	// ErrRefused: the host's dcgmi is there but is not run, because a user
	// other than root could have written it (it is also ErrNotInstalled).
	ErrRefused = errors.New("the host's dcgmi is refused")
	// ErrUnreachable: dcgmi runs but no host engine answers at the address.
	ErrUnreachable = errors.New("no DCGM host engine answers")
	// ErrWatchesOff: the host engine has no health watches for the GPUs.
	ErrWatchesOff = errors.New("DCGM health watches are not enabled")
)

// DefaultDcgmi is the tool's name, looked up in the agent's PATH.
const DefaultDcgmi = "dcgmi"

// Output bounds: a health check or dmon prints a few KiB, a diagnostic of a
// large node a few hundred; anything beyond is not dcgmi talking.
const (
	maxHealthOutput = 4 << 20
	maxDiagOutput   = 32 << 20
)

// Client runs dcgmi against one host engine. Without a Runner or a
// HostRunner every call is ErrNotInstalled; an empty Dcgmi means
// DefaultDcgmi; an empty HostEngine means dcgmi's default (localhost, port
// 5555); an empty From means FromAuto.
type Client struct {
	// Runner runs the tools of the agent's own filesystem.
	Runner command.Runner
	// HostRunner runs the tools of the host's filesystem, inside it
	// (command.Exec with Root); nil where the agent has no
	// separate host root.
	HostRunner command.Runner
	// From says whose dcgmi to run.
	From ToolFrom
	// Dcgmi is the tool: a name looked up in PATH, or a path.
	Dcgmi string
	// HostEngine is dcgmi's --host: "host", "host:port" or
	// "unix:///path/to/socket".
	HostEngine string
}

func (c *Client) tool() string {
	if c.Dcgmi == "" {
		return DefaultDcgmi
	}
	return c.Dcgmi
}

// locate picks the dcgmi to run: the agent's, else the host's (as From
// allows), and names it for messages.
func (c *Client) locate() (command.Runner, string, error) {
	var tried []string
	refused := false
	try := func(r command.Runner, whose string) bool {
		if r == nil {
			return false
		}
		if _, err := r.LookPath(c.tool()); err != nil {
			tried = append(tried, whose+": "+err.Error())
			refused = refused || errors.Is(err, command.ErrUntrusted)
			return false
		}
		return true
	}
	if c.From != FromHost && try(c.Runner, "the agent's") {
		return c.Runner, c.tool(), nil
	}
	if c.From != FromAgent && try(c.HostRunner, "the host's") {
		return c.HostRunner, "the host's " + c.tool(), nil
	}
	if len(tried) == 0 {
		return nil, "", fmt.Errorf("%w: no command runner for dcgmiFrom %s", ErrNotInstalled, c.from())
	}
	if refused {
		return nil, "", fmt.Errorf("%w (%w): %s", ErrNotInstalled, ErrRefused, strings.Join(tried, "; "))
	}
	return nil, "", fmt.Errorf("%w: %s", ErrNotInstalled, strings.Join(tried, "; "))
}

func (c *Client) from() ToolFrom {
	if c.From == "" {
		return FromAuto
	}
	return c.From
}

// Installed reports whether the tool can be run, or ErrNotInstalled.
func (c *Client) Installed() error {
	_, _, err := c.locate()
	return err
}

// Tool names the dcgmi that runs ("dcgmi", "the host's dcgmi"), or "" when
// there is none.
func (c *Client) Tool() string {
	_, name, _ := c.locate()
	return name
}

// Where names the host engine for messages.
func (c *Client) Where() string {
	if c.HostEngine == "" {
		return "localhost:5555"
	}
	return c.HostEngine
}

func (c *Client) run(ctx context.Context, limit int64, args ...string) ([]byte, error) {
	runner, _, err := c.locate()
	if err != nil {
		return nil, err
	}
	if c.HostEngine != "" {
		args = append(args, "--host", c.HostEngine)
	}
	out := &childproc.LimitedBuffer{Limit: int(limit)}
	err = runner.Run(ctx, c.tool(), args, out)
	if out.Over() {
		return nil, fmt.Errorf("dcgmi %s printed more than %d bytes", args[0], limit)
	}
	if isUnreachable(out.Bytes()) {
		return nil, fmt.Errorf("%w at %s: %s", ErrUnreachable, c.Where(), firstLine(out.Bytes()))
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("dcgmi %s: %w", args[0], ctx.Err())
	}
	// dcgmi exits with the DCGM return code, non-zero also when it printed a
	// complete result (a failed diagnostic): the caller parses the output
	// and uses err only when that fails.
	return out.Bytes(), err
}

// isUnreachable recognizes dcgmi's connection failures (dcgmi/Command.cpp
// Connect, DoExecuteConnectionFailure).
func isUnreachable(out []byte) bool {
	return bytes.Contains(out, []byte("unable to establish a connection to the specified host")) ||
		bytes.Contains(out, []byte("Unable to connect to host engine")) ||
		bytes.Contains(out, []byte("Host engine connection invalid/disconnected"))
}

func firstLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return textcut.Ellipsis(s, 256)
}

// Health runs `dcgmi health --check --json` on the GPU group.
func (c *Client) Health(ctx context.Context) (HealthReport, error) {
	out, runErr := c.run(ctx, maxHealthOutput, "health", "--check", "--json")
	if out == nil && runErr != nil {
		return HealthReport{}, runErr
	}
	if bytes.Contains(out, []byte("Health watches not enabled")) {
		return HealthReport{}, ErrWatchesOff
	}
	r, err := ParseHealth(out)
	if err != nil {
		if runErr != nil {
			return HealthReport{}, fmt.Errorf("dcgmi health: %v: %s", runErr, firstLine(out))
		}
		return HealthReport{}, err
	}
	return r, nil
}

// EnableWatches sets the health watches of the GPU group to every system
// dcgmi's "a" selects (PCIe, memory, InfoROM, thermal, power, NVLink,
// driver, ConnectX, NvSwitch). The host engine keeps them after dcgmi exits.
func (c *Client) EnableWatches(ctx context.Context) error {
	out, err := c.run(ctx, maxHealthOutput, "health", "--set", "a")
	if err != nil {
		return fmt.Errorf("dcgmi health --set a: %w", err)
	}
	if !bytes.Contains(out, []byte("set successfully")) {
		return fmt.Errorf("dcgmi health --set a: %s", firstLine(out))
	}
	return nil
}

// Fields reads the latest values of fields on the GPUs (`dcgmi dmon
// --field-id F --count 1`).
func (c *Client) Fields(ctx context.Context, fields []FieldID) ([]FieldRow, error) {
	ids := make([]string, len(fields))
	for i, f := range fields {
		ids[i] = strconv.Itoa(int(f))
	}
	out, runErr := c.run(ctx, maxHealthOutput, "dmon", "--field-id", strings.Join(ids, ","), "--count", "1")
	if out == nil && runErr != nil {
		return nil, runErr
	}
	rows, err := ParseDmon(out, fields)
	if err != nil {
		return nil, err
	}
	if runErr != nil && len(rows) == 0 {
		return nil, fmt.Errorf("dcgmi dmon: %v: %s", runErr, firstLine(out))
	}
	return rows, nil
}

// Diag runs `dcgmi diag --run LEVEL --json` and returns the parsed report
// and dcgmi's output as printed. timeout, when positive, is handed to
// dcgmi too (--timeout, whole seconds), so that the host engine stops the
// run itself rather than leaving it running after the agent gave up.
func (c *Client) Diag(ctx context.Context, level int, timeout time.Duration) (DiagReport, []byte, error) {
	if level < 1 || level > 4 {
		return DiagReport{}, nil, fmt.Errorf("diagnostic level %d is not 1 to 4", level)
	}
	args := []string{"diag", "--run", strconv.Itoa(level), "--json"}
	if timeout > 0 {
		args = append(args, "--timeout", strconv.Itoa(int(max(1, timeout/time.Second))))
	}
	out, runErr := c.run(ctx, maxDiagOutput, args...)
	if out == nil && runErr != nil {
		return DiagReport{}, nil, runErr
	}
	r, err := ParseDiag(out)
	if err != nil {
		if runErr != nil {
			return DiagReport{}, out, fmt.Errorf("dcgmi diag: %v: %s", runErr, firstLine(out))
		}
		return DiagReport{}, out, err
	}
	return r, out, nil
}
