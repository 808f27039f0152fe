package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testConfig = Config{
	OS: "linux", Architecture: "amd64",
	User: "65532:65532", Entrypoint: []string{"/tool"},
	Env: []string{"PATH=/usr/bin:/bin"}, Volumes: []string{"/data"}, ExposedPorts: []string{"8080/tcp"},
}

// buildFixtureImage writes a base layer from the fixture rootfs (in the
// given entry order and timestamps) and a binary layer into dir, and
// assembles an image from them, as the builder does.
func buildFixtureImage(t *testing.T, dir string, order []int, when time.Time) v1.Image {
	t.Helper()
	base := filepath.Join(dir, "base.tar.gz")
	entries, err := ReadTar(bytes.NewReader(fixtureRootfs(order, when)))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLayerFile(base, entries, epoch); err != nil {
		t.Fatal(err)
	}
	binPath := filepath.Join(dir, "bin.tar.gz")
	if err := WriteLayerFile(binPath, FileEntries([]File{{Path: "/tool", Mode: 0o755, Data: []byte("\x7fELF tool")}}), epoch); err != nil {
		t.Fatal(err)
	}
	img, err := Assemble(testConfig, []Layer{{Path: base, CreatedBy: "base"}, {Path: binPath, CreatedBy: "go build"}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("invalid image: %v", err)
	}
	return img
}

func archiveOf(t *testing.T, tag string, img v1.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&buf, ref, img, epoch); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Two builds from the same files — in other directories, with the rootfs
// written in another order at another time — give the same image digest
// and byte-identical archives.
func TestImageIsReproducible(t *testing.T) {
	order := identity(14)
	shuffled := slices.Clone(order)
	slices.Reverse(shuffled[1:])
	a := buildFixtureImage(t, t.TempDir(), order, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	b := buildFixtureImage(t, t.TempDir(), shuffled, time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("digests differ: %s and %s", da, db)
	}
	const tag = "registry.test/nodemend/tool:1.0"
	if !bytes.Equal(archiveOf(t, tag, a), archiveOf(t, tag, b)) {
		t.Fatal("archives of the same image differ")
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Time.Equal(epoch) || len(cf.History) != 2 || !cf.History[1].Created.Time.Equal(epoch) {
		t.Errorf("created %v, history %+v: want every time at the epoch", cf.Created, cf.History)
	}
	mt, _ := a.MediaType()
	if mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
}

// The archive is an OCI image layout (what `ctr images import` and
// oci-archive: readers take) and a `docker save` archive at once, both
// naming the same image, with its config intact.
func TestArchiveReadsAsOCILayoutAndDockerArchive(t *testing.T) {
	img := buildFixtureImage(t, t.TempDir(), identity(14), epoch)
	want, _ := img.Digest()
	const tag = "registry.test/nodemend/tool:1.0"
	data := archiveOf(t, tag, img)

	// OCI layout: unpack, open with go-containerregistry's layout reader.
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != epoch.Unix() || h.Uid != 0 {
			t.Errorf("%s: header %+v", h.Name, h)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.Digest != want || d.Annotations["io.containerd.image.name"] != tag || d.Annotations["org.opencontainers.image.ref.name"] != "1.0" {
		t.Errorf("index descriptor %+v", d)
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("index platform %+v", d.Platform)
	}
	fromLayout, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(fromLayout); err != nil {
		t.Errorf("image from the OCI layout: %v", err)
	}

	// docker save format: go-containerregistry's tarball reader follows
	// manifest.json to the same config and layers (Docker writes its own
	// manifest on load, so only those are compared).
	path := filepath.Join(t.TempDir(), "image.tar")
	os.WriteFile(path, data, 0o644)
	fromDocker, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, _ := img.ConfigName()
	if got, _ := fromDocker.ConfigName(); got != wantConfig {
		t.Errorf("docker archive config %s, want %s", got, wantConfig)
	}
	wantLayers, _ := img.Layers()
	gotLayers, err := fromDocker.Layers()
	if err != nil || len(gotLayers) != len(wantLayers) {
		t.Fatalf("docker archive layers %v (%v)", gotLayers, err)
	}
	for i := range gotLayers {
		g, _ := gotLayers[i].Digest()
		w, _ := wantLayers[i].Digest()
		if g != w {
			t.Errorf("docker archive layer %d: %s, want %s", i, g, w)
		}
	}
	var manifest []struct{ RepoTags []string }
	if f, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err != nil || json.Unmarshal(f, &manifest) != nil || len(manifest) != 1 || manifest[0].RepoTags[0] != tag {
		t.Errorf("manifest.json: %s (%v)", f, err)
	}
	cf, err := fromDocker.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/tool"}) || len(c.Volumes) != 1 || len(c.ExposedPorts) != 1 {
		t.Errorf("config %+v", c)
	}
}

// An image needs a platform: containerd picks images by it.
func TestAssembleNeedsPlatform(t *testing.T) {
	if _, err := Assemble(Config{User: "0:0"}, nil, epoch); err == nil {
		t.Error("an image without OS and architecture was assembled")
	}
}

// A layer file's descriptor is what go-containerregistry computes from
// the file itself; a file that changed since is refused.
func TestLayerFileDescriptor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "layer.tar.gz")
	if err := WriteLayerFile(path, FileEntries([]File{{Path: "/tool", Mode: 0o755, Data: []byte("tool")}}), epoch); err != nil {
		t.Fatal(err)
	}
	ours, err := OpenLayer(path)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := tarball.LayerFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(v1.Layer) (v1.Hash, error){v1.Layer.Digest, v1.Layer.DiffID} {
		a, _ := f(ours)
		b, _ := f(theirs)
		if a != b {
			t.Errorf("descriptor %s, computed %s", a, b)
		}
	}
	if err := os.WriteFile(path, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLayer(path); err == nil {
		t.Error("a changed layer file was opened")
	}
}
