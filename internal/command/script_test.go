package command

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestWildcard(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"journalctl * --unit=kubelet.service", "journalctl --no-pager --since=@1 --unit=kubelet.service", true},
		{"journalctl * --unit=kubelet.service", "journalctl --unit=containerd.service", false},
		{"ss *", "ss -s", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXcYb", false},
		{"exact", "exact", true},
	}
	for _, tc := range cases {
		if got := wildcard(tc.pattern, tc.s); got != tc.want {
			t.Errorf("wildcard(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

func TestScript(t *testing.T) {
	s := NewScript().Set("df -PT", Result{Stdout: "out"}).Set("df *", Result{Stdout: "any"}).Set("slow", Result{Delay: time.Hour})
	var b bytes.Buffer
	if err := s.Run(context.Background(), "df", []string{"-PT"}, &b); err != nil || b.String() != "out" {
		t.Fatalf("exact: %q %v", b.String(), err)
	}
	b.Reset()
	if err := s.Run(context.Background(), "df", []string{"-h"}, &b); err != nil || b.String() != "any" {
		t.Fatalf("wildcard: %q %v", b.String(), err)
	}
	if _, err := s.LookPath("nft"); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("LookPath of an unscripted tool: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx, "slow", nil, &b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delay past the deadline: %v", err)
	}
	if len(s.Calls()) != 3 {
		t.Fatalf("calls %v", s.Calls())
	}
}
