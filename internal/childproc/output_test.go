package childproc

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func sh(t *testing.T, script string, limit int) Tool {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	return Tool{Path: p, Args: []string{"-c", script}, Limit: limit}
}

func TestOutput(t *testing.T) {
	ctx := context.Background()
	out, err := Output(ctx, sh(t, `printf 'a\nb\n'; echo noise >&2`, 100))
	if err != nil || string(out) != "a\nb\n" {
		t.Fatalf("%q, %v", out, err)
	}
	if _, err := Output(ctx, sh(t, `echo "cannot open /dev/nvme9n1" >&2; exit 3`, 100)); err == nil || !strings.Contains(err.Error(), "exit status 3: cannot open /dev/nvme9n1") {
		t.Fatalf("a failing tool: %v", err)
	}
	if _, err := Output(ctx, sh(t, `yes | head -c 1000`, 100)); !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := Output(cctx, sh(t, `sleep 30`, 100)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hung tool: %v", err)
	}
	if _, err := Output(ctx, Tool{Path: "/nonexistent/tool"}); err == nil {
		t.Fatal("a missing tool")
	}
}

func TestLines(t *testing.T) {
	ctx := context.Background()
	var got []string
	err := Lines(ctx, sh(t, `printf 'one\ntwo\nthree'`, 100), func(l []byte) { got = append(got, string(l)) })
	if err != nil || strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("%q, %v", got, err)
	}
	n := 0
	if err := Lines(ctx, sh(t, `yes x | head -c 100000`, 1000), func([]byte) { n++ }); !errors.Is(err, ErrOutputTooLarge) || n > 501 {
		t.Fatalf("over the limit: %v after %d lines", err, n)
	}
	if err := Lines(ctx, sh(t, `echo partial; echo "iptables: Permission denied" >&2; exit 4`, 100), func([]byte) {}); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("a failing tool: %v", err)
	}
}
