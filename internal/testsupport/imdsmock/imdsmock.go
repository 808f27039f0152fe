// Package imdsmock runs AWS's EC2 instance metadata mock (ec2-metadata-mock,
// built by hack/metadata-mock.sh at the version pinned in hack/tools/go.mod)
// on loopback, for tests and the simulation: the agent's metadata client is
// pointed at it, never at the real link-local metadata address.
package imdsmock

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Binary builds the mock (first time only) and returns its path.
func Binary() (string, error) {
	buildOnce.Do(func() { binary, buildErr = testenv.BuildScript("metadata-mock.sh") })
	return binary, buildErr
}

// Mock is a running ec2-metadata-mock.
type Mock struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	cmd      *exec.Cmd
	out      *bytes.Buffer
	mu       sync.Mutex
}

// Start runs the mock with IMDSv2 required (every GET needs a session
// token) and args (a subcommand such as "events" or "spot" with its flags,
// or global flags such as --mock-delay-sec; none serves every path with the
// mock's defaults: a system-reboot scheduled event and a spot "terminate"
// notice two minutes ahead). Its working directory and HOME are a fresh
// directory, so no config file of the machine is read. Stop it with Stop.
func Start(args ...string) (*Mock, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "imdsmock-")
	if err != nil {
		return nil, err
	}
	full := append(append([]string{}, args...), "--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--imdsv2")
	cmd := exec.Command(bin, full...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	out := &bytes.Buffer{}
	m := &Mock{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, out: out}
	cmd.Stdout, cmd.Stderr = m, m
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); _ = os.RemoveAll(dir) }()
	if err := m.waitReady(20 * time.Second); err != nil {
		m.Stop()
		return nil, fmt.Errorf("ec2-metadata-mock did not answer: %w\n%s", err, m.Output())
	}
	return m, nil
}

// Write collects the mock's log.
func (m *Mock) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out.Len() < 1<<20 {
		m.out.Write(p)
	}
	return len(p), nil
}

// Output is what the mock logged.
func (m *Mock) Output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// Requests counts the GETs of path (no leading slash) the mock has logged:
// it logs every request it validates, so a test can wait for the agent's
// checks to have happened instead of sleeping for their period.
func (m *Mock) Requests(path string) int {
	return strings.Count(m.Output(), "Received request: &{GET /"+path+" ")
}

// Stop kills the mock.
func (m *Mock) Stop() {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
	}
}

func (m *Mock) waitReady(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, m.Endpoint+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ConfigFile writes a mock config file (the mock's JSON format) into dir
// and returns its path, for --config-file.
func ConfigFile(dir string, content string) (string, error) {
	p := filepath.Join(dir, "aemm-config.json")
	return p, os.WriteFile(p, []byte(content), 0o600)
}
