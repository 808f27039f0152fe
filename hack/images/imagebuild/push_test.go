package imagebuild

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Push uploads the image to a registry (go-containerregistry's in-process
// one) under its tag: pulling the tag gives the same digest, config and
// layers.
func TestPushToRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := buildFixtureImage(t, t.TempDir(), identity(14), epoch)
	want, _ := img.Digest()

	tag, err := name.NewTag(host + "/nodemend/tool:v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ref, err := Push(context.Background(), tag, img, &out)
	if err != nil {
		t.Fatal(err)
	}
	if ref.DigestStr() != want.String() || !strings.Contains(out.String(), tag.String()) {
		t.Errorf("pushed %s (log %q), want digest %s", ref, out.String(), want)
	}
	pulled, err := remote.Image(tag)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("the registry's %s is %s, want %s", tag, got, want)
	}
	if err := validate.Image(pulled); err != nil {
		t.Errorf("pulled image: %v", err)
	}
	cf, err := pulled.ConfigFile()
	if err != nil || cf.Config.User != "65532:65532" {
		t.Errorf("pulled config %+v (%v)", cf, err)
	}
	// A second push of the same image finds every blob there and succeeds.
	if _, err := Push(context.Background(), tag, img, &out); err != nil {
		t.Errorf("second push: %v", err)
	}
}

// A registry that refuses the push makes Push fail with the tag in the
// error; nothing is reported as pushed.
func TestPushFailsWhenTheRegistryRefuses(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, `{"errors":[{"code":"DENIED","message":"read-only registry"}]}`, http.StatusForbidden)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tag, _ := name.NewTag(u.Host + "/nodemend/tool:v1")
	var out bytes.Buffer
	_, err := Push(context.Background(), tag, buildFixtureImage(t, t.TempDir(), identity(14), epoch), &out)
	if err == nil || !strings.Contains(err.Error(), tag.String()) {
		t.Fatalf("push to a refusing registry: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("log %q after a failed push", out.String())
	}
}
