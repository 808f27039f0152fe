package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// cpuProfile takes a CPU profile of the process serving /debug/pprof/ at
// base (a URL) through hc, for d from start, into path.
func cpuProfile(ctx context.Context, hc *http.Client, base, who string, start time.Time, d time.Duration, path string) error {
	if err := sleepCtx(ctx, time.Until(start)); err != nil {
		return err
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if err = errors.Join(err, f.Close()); err == nil {
		say("%s CPU profile of %v from %s: %s (go tool pprof -top %s)", who, d, start.Format("15:04:05"), path, path)
	}
	return err
}

// profiles takes the storm's CPU profiles: the controller's from a second
// before the tolerations end, and with the API server's flag, the API
// server's over the same span and over the write ceiling, so that the cost
// of a repair's write and of the plain client's can be set side by side.
type profiles struct {
	d          time.Duration
	dir        string
	controller string // the controller's pprof address; "" for none
	apiserver  *rest.Config
}

func (p profiles) controllerAt(ctx context.Context, start time.Time) error {
	if p.controller == "" {
		return nil
	}
	return cpuProfile(ctx, http.DefaultClient, "http://"+p.controller, "controller", start, p.d, filepath.Join(p.dir, "controller-cpu.pprof"))
}

func (p profiles) apiserverAt(ctx context.Context, start time.Time, name string) error {
	if p.apiserver == nil {
		return nil
	}
	hc, err := rest.HTTPClientFor(p.apiserver)
	if err != nil {
		return err
	}
	return cpuProfile(ctx, hc, strings.TrimSuffix(p.apiserver.Host, "/"), "kube-apiserver", start, p.d, filepath.Join(p.dir, "apiserver-"+name+"-cpu.pprof"))
}
