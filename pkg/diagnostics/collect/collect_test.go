package collect

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
)

func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

func writes(files map[string]string) func(context.Context, *Output) error {
	return func(_ context.Context, out *Output) error {
		for name, content := range files {
			if err := out.WriteFile(name, []byte(content)); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestRun(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	collectors := []Collector{
		{Name: "base/os", Category: "base", Run: writes(map[string]string{"os-release": "ID=debian\n"})},
		{Name: "system/env", Category: "system", Run: writes(map[string]string{"env": "PATH=/bin\nAPI_TOKEN=s3cr3t-value\n"})},
		{Name: "accelerators/nvidia", Category: "accelerators", Run: func(context.Context, *Output) error { return Skip("nvidia-smi not installed") }},
		{Name: "system/fails", Category: "system", Run: func(context.Context, *Output) error { return errors.New("permission denied") }},
		{Name: "system/leaky", Category: "system", Run: func(context.Context, *Output) error {
			return errors.New("exit status 1: curl: Authorization: Bearer abcdef0123456789 refused")
		}},
		{Name: "system/panics", Category: "system", Run: func(context.Context, *Output) error { panic("boom") }},
		// Overruns its timeout but stops when told: a timeout error, files kept.
		{Name: "system/slow", Category: "system", Timeout: 50 * time.Millisecond, Run: func(ctx context.Context, out *Output) error {
			_ = out.WriteFile("slow-part", []byte("partial\n"))
			<-ctx.Done()
			return ctx.Err()
		}},
		// Hangs and ignores its context (a read stuck in the kernel): it is
		// abandoned; the file it finished is kept, the open one dropped.
		{Name: "storage/hung", Category: "storage", Timeout: 50 * time.Millisecond, Run: func(_ context.Context, out *Output) error {
			_ = out.WriteFile("before-hang", []byte("ok\n"))
			f, _ := out.Create("during-hang")
			_, _ = f.Write([]byte("half"))
			<-hang
			return nil
		}},
	}
	var buf bytes.Buffer
	b := bundle.New(&buf, bundle.Options{Root: "r"})
	var progress []int
	start := time.Now()
	res, redactions, err := Run(context.Background(), collectors, b, Options{
		SpoolDir: filepath.Join(t.TempDir(), "spool"), Grace: 100 * time.Millisecond,
		OnDone: func(_ bundle.CollectorResult, done, total int) { progress = append(progress, done) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a hung collector held the bundle for %v", took)
	}
	if err := b.Close(bundle.Manifest{Collectors: res}); err != nil {
		t.Fatal(err)
	}
	if len(progress) != len(collectors) || progress[len(progress)-1] != len(collectors) {
		t.Fatalf("progress %v", progress)
	}
	byName := map[string]bundle.CollectorResult{}
	for i, r := range res {
		if r.Name != collectors[i].Name {
			t.Fatalf("results out of order: %d is %s", i, r.Name)
		}
		byName[r.Name] = r
	}
	check := func(name string, ok bool, what string) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %s: %+v", name, what, byName[name])
		}
	}
	check("base/os", byName["base/os"].Error == "" && len(byName["base/os"].Files) == 1, "clean")
	check("accelerators/nvidia", byName["accelerators/nvidia"].Skipped == "nvidia-smi not installed" && byName["accelerators/nvidia"].Error == "", "skipped")
	check("system/fails", byName["system/fails"].Error == "permission denied", "error")
	check("system/leaky", byName["system/leaky"].Error == "exit status 1: curl: Authorization: [REDACTED]", "redacted error")
	check("system/panics", strings.Contains(byName["system/panics"].Error, "panicked: boom"), "panic")
	check("system/slow", byName["system/slow"].TimedOut && strings.HasPrefix(byName["system/slow"].Error, "timed out after 50ms"), "timeout")
	hung := byName["storage/hung"]
	check("storage/hung", hung.TimedOut && strings.Contains(hung.Error, "abandoned") && len(hung.Files) == 2 &&
		hung.Files[0].Path == "storage/before-hang" && hung.Files[1].Note != "", "abandoned")
	if redactions != 1 {
		t.Errorf("redactions = %d, want 1", redactions)
	}

	files := untar(t, buf.Bytes())
	if files["r/base/os-release"] != "ID=debian\n" || files["r/system/slow-part"] != "partial\n" || files["r/storage/before-hang"] != "ok\n" {
		t.Errorf("bundle files: %v", files)
	}
	if _, ok := files["r/storage/during-hang"]; ok {
		t.Error("the half-written file of an abandoned collector is in the bundle")
	}
	if env := files["r/system/env"]; strings.Contains(env, "s3cr3t") || !strings.Contains(env, "API_TOKEN=[REDACTED]") {
		t.Errorf("env not redacted: %q", env)
	}
}

func TestPerFileLimit(t *testing.T) {
	var buf bytes.Buffer
	b := bundle.New(&buf, bundle.Options{Root: "r"})
	res, _, err := Run(context.Background(), []Collector{{Name: "system/big", Category: "system", Run: func(_ context.Context, out *Output) error {
		f, err := out.Create("big")
		if err != nil {
			return err
		}
		for i := 0; i < 100; i++ {
			if _, err := f.Write([]byte(strings.Repeat("x", 99) + "\n")); err != nil {
				if errors.Is(err, ErrFileLimit) && f.Full() {
					break
				}
				return err
			}
		}
		return f.Close()
	}}}, b, Options{SpoolDir: filepath.Join(t.TempDir(), "s"), MaxFileBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	f := res[0].Files[0]
	if res[0].Error != "" || f.Bytes != 1000 || !strings.Contains(f.Note, "per-file limit") {
		t.Fatalf("result %+v", res[0])
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf bytes.Buffer
	res, _, err := Run(ctx, []Collector{{Name: "a/b", Category: "a", Run: writes(nil)}}, bundle.New(&buf, bundle.Options{}), Options{SpoolDir: t.TempDir() + "/s", Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error == "" {
		t.Fatalf("collector of a cancelled bundle: %+v", res[0])
	}
}
