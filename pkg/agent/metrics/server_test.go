package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServerHealthReadyMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := NewAgent()
	m.Detection("SoftLockup", "Warning")
	s := NewServer(addr, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	get := func(path string) (int, string) {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				if time.Now().After(deadline) {
					t.Fatal(err)
				}
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body)
		}
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before SetReady: %d", code)
	}
	s.SetReady()
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after SetReady: %d", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `nodemend_agent_detections_total{reason="SoftLockup",severity="Warning"} 1`) {
		t.Fatalf("/metrics lacks the detection counter:\n%s", body)
	}
}

func TestNilMetricsAreSafe(t *testing.T) {
	var m *Agent
	m.Detection("x", "y")
	m.ConditionStatus("KernelReady", "True")
	m.DetectionToWrite("KernelReady", time.Second)
}
