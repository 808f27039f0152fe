package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// readResults reads the images.json a build wrote into dir.
func readResults(t *testing.T, dir string) []result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rs []result
	if err := json.Unmarshal(data, &rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

// What `make images REGISTRY=… TAG=…` does, for the image that needs no
// base root file system (and so no root, no mmdebstrap): built twice,
// once filling a cache and once ignoring it, in other directories, it has
// the same digest and a byte-identical archive; the push puts that digest
// under the tag in a registry (go-containerregistry's in-process one).
// The bases' own reproducibility is what `make images-reproducible`
// checks on a machine that can bootstrap them.
func TestBuildIsReproducibleAndPushed(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/nodemend"
	const tag = "v0.0.0-test"
	build := func(push, noCache bool) (string, []result) {
		out := t.TempDir()
		var logs bytes.Buffer
		err := run(context.Background(), options{
			out: out, registry: repo, tag: tag, push: push, platform: "linux/" + runtime.GOARCH,
			only: "nodemend-pause", cacheDir: t.TempDir(), noCache: noCache,
		}, &logs)
		if err != nil {
			t.Fatalf("build: %v\n%s", err, logs.String())
		}
		t.Logf("build (push=%v, no-cache=%v):\n%s", push, noCache, logs.String())
		return out, readResults(t, out)
	}
	dirA, a := build(true, false)
	dirB, b := build(false, true)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("images.json lists %d and %d images, want 1", len(a), len(b))
	}
	if a[0].Digest != b[0].Digest {
		t.Errorf("two builds of the same sources: %s, then %s", a[0].Digest, b[0].Digest)
	}
	archiveA, err := os.ReadFile(filepath.Join(dirA, a[0].Archive))
	if err != nil {
		t.Fatal(err)
	}
	archiveB, err := os.ReadFile(filepath.Join(dirB, b[0].Archive))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(archiveA, archiveB) {
		t.Error("the two archives differ")
	}
	if want := repo + "/nodemend-pause:" + tag; a[0].Ref != want {
		t.Errorf("ref %s, want %s", a[0].Ref, want)
	}

	ref, err := name.NewTag(a[0].Ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("the pushed image: %v", err)
	}
	if d, _ := pulled.Digest(); d.String() != a[0].Digest {
		t.Errorf("the registry holds %s as %s, images.json says %s", ref, d, a[0].Digest)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65535:65535" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/pause" ||
		cf.Architecture != runtime.GOARCH || !cf.Created.Equal(epoch) {
		t.Errorf("pushed config: user %q, entrypoint %q, architecture %s, created %s", cf.Config.User, cf.Config.Entrypoint, cf.Architecture, cf.Created)
	}
}
