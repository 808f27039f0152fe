package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The workload is healthy while it serves; once stopped it answers 503
// for the shutdown delay, then returns without an error.
func TestServeUntilStopped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, 2*time.Second, io.Discard) }()

	if code, body := get(t, url+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthz %d %q", code, body)
	}
	if _, body := get(t, url+"/"); !strings.HasPrefix(body, "uid=") {
		t.Errorf("/ says %q", body)
	}
	stop()
	deadline := time.Now().Add(time.Second)
	for {
		code, _ := get(t, url+"/healthz")
		if code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz still %d after the stop", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the shutdown delay")
	}
}
