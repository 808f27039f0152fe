package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// cpuProfile takes a CPU profile of the process serving /debug/pprof/ at
// addr, for d from start, into path.
func cpuProfile(ctx context.Context, addr string, start time.Time, d time.Duration, path string) error {
	if err := sleepCtx(ctx, time.Until(start)); err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
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
		say("controller CPU profile of %v from %s: %s (go tool pprof -top %s)", d, start.Format("15:04:05"), path, path)
	}
	return err
}
