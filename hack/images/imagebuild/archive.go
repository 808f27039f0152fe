package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotation keys of an archive's index: containerd's import names the
// image from the first, the OCI layout convention gives the tag in the
// second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// dockerManifest is one entry of the manifest.json that `docker load`
// reads (the format of `docker save`).
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes img, named tag, as a tar holding an OCI image layout
// (oci-layout, index.json, blobs/sha256/…) and the manifest.json of a
// `docker save` archive pointing into the same blobs. containerd
// (`ctr images import`), Docker (`docker load`), podman and skopeo
// (`oci-archive:`) read it. Members come in a fixed order with fixed
// headers, so equal images give byte-equal archives.
func WriteArchive(w io.Writer, tag name.Tag, img v1.Image, epoch time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mt,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
			Annotations: map[string]string{
				annotationContainerdName: tag.Name(),
				annotationRefName:        tag.TagStr(),
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	docker := []dockerManifest{{Config: blobPath(configName), RepoTags: []string{tag.Name()}}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		docker[0].Layers = append(docker[0].Layers, blobPath(d))
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return err
	}

	aw := archiveWriter{tw: tar.NewWriter(w), epoch: epoch}
	aw.dir("blobs/")
	aw.dir("blobs/sha256/")
	aw.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	aw.file("index.json", indexJSON)
	aw.file("manifest.json", dockerJSON)
	aw.file(blobPath(configName), config)
	aw.file(blobPath(digest), manifest)
	written := map[v1.Hash]bool{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if written[d] {
			continue
		}
		written[d] = true
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		aw.stream(blobPath(d), size, rc)
		rc.Close()
	}
	if aw.err != nil {
		return aw.err
	}
	return aw.tw.Close()
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// archiveWriter writes archive members with fixed headers and keeps the
// first error.
type archiveWriter struct {
	tw    *tar.Writer
	epoch time.Time
	err   error
}

func (a *archiveWriter) dir(name string) {
	if a.err == nil {
		a.err = a.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: a.epoch})
	}
}

func (a *archiveWriter) file(name string, data []byte) {
	a.stream(name, int64(len(data)), bytes.NewReader(data))
}

func (a *archiveWriter) stream(name string, size int64, r io.Reader) {
	if a.err != nil {
		return
	}
	if a.err = a.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: a.epoch}); a.err != nil {
		return
	}
	n, err := io.Copy(a.tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
	}
	a.err = err
}
