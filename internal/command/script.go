package command

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Script is a Runner with scripted results, for tests. Keys are the command
// line joined by spaces ("journalctl -u kubelet"); "*" in a key matches any
// text ("journalctl * --unit=kubelet.service"). The longest matching key
// wins.
type Script struct {
	mu      sync.Mutex
	results map[string]Result
	calls   []string
}

// Result is the scripted outcome of one command.
type Result struct {
	Stdout string
	Err    error
	// Delay is waited before answering (cut short by the context).
	Delay time.Duration
	// Hang blocks until Release is called, ignoring the context: a tool
	// stuck in the kernel (D state) that even SIGKILL does not stop at once.
	Hang chan struct{}
}

// NewScript returns an empty script: every tool is "not installed".
func NewScript() *Script { return &Script{results: map[string]Result{}} }

// Set scripts the result of a command line.
func (s *Script) Set(cmdline string, r Result) *Script {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results[cmdline] = r
	return s
}

// Calls returns the command lines run so far.
func (s *Script) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *Script) lookup(cmdline string) (Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.results[cmdline]; ok {
		return r, true
	}
	best, found := "", false
	for k := range s.results {
		if strings.Contains(k, "*") && wildcard(k, cmdline) && len(k) > len(best) {
			best, found = k, true
		}
	}
	return s.results[best], found
}

// wildcard matches s against pattern, where "*" matches any text.
func wildcard(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, p)
		}
		j := strings.Index(s, p)
		if j < 0 {
			return false
		}
		s = s[j+len(p):]
	}
	return true
}

// LookPath implements Runner: a tool is installed when any script entry
// runs it.
func (s *Script) LookPath(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.results {
		if k == name || strings.HasPrefix(k, name+" ") {
			return "/usr/bin/" + name, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, ErrNotInstalled)
}

// Run implements Runner.
func (s *Script) Run(ctx context.Context, name string, args []string, stdout io.Writer) error {
	cmdline := strings.Join(append([]string{name}, args...), " ")
	s.mu.Lock()
	s.calls = append(s.calls, cmdline)
	s.mu.Unlock()
	r, ok := s.lookup(cmdline)
	if !ok {
		return fmt.Errorf("%s: %w", name, ErrNotInstalled)
	}
	if r.Hang != nil {
		<-r.Hang
	}
	if r.Delay > 0 {
		t := time.NewTimer(r.Delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
	if _, err := io.WriteString(stdout, r.Stdout); err != nil {
		return err
	}
	return r.Err
}
