// Package childproc holds what the agent needs around the host tools it
// starts (journalctl, diagnostics commands): the end of their standard
// error for error messages, their death with the agent, and the root
// filesystem they run in.
package childproc

import "sync"

// Tail keeps the last Keep bytes written to it: enough of a tool's standard
// error to explain a failure, bounded however much it writes.
type Tail struct {
	Keep int

	mu  sync.Mutex
	buf []byte
}

func (b *Tail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Keep; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *Tail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
