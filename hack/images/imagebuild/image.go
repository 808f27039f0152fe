package imagebuild

import (
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image declares about how it runs: the parts of the OCI
// image config a Dockerfile sets.
type Config struct {
	OS, Architecture, Variant string
	User                      string
	Entrypoint, Cmd, Env      []string
	WorkingDir                string
	Volumes                   []string
	ExposedPorts              []string
	Labels                    map[string]string
}

// Layer is a layer file (WriteLayerFile) and the build step that made it
// (the image history shows it, as `docker history` does).
type Layer struct {
	Path      string
	CreatedBy string
}

// Assemble builds an OCI image (OCI media types throughout) from layers,
// bottom first, with created times set to epoch.
func Assemble(cfg Config, layers []Layer, epoch time.Time) (v1.Image, error) {
	if cfg.OS == "" || cfg.Architecture == "" {
		return nil, fmt.Errorf("image config needs an OS and an architecture")
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: epoch.UTC()}
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		layer, err := OpenLayer(l.Path)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Path, err)
		}
		adds = append(adds, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: created, CreatedBy: l.CreatedBy},
		})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = cfg.OS, cfg.Architecture, cfg.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       cfg.User,
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		Env:        cfg.Env,
		WorkingDir: cfg.WorkingDir,
		Labels:     cfg.Labels,
		Volumes:    set(cfg.Volumes),
	}
	if ports := set(cfg.ExposedPorts); ports != nil {
		cf.Config.ExposedPorts = ports
	}
	return mutate.ConfigFile(img, cf)
}

func set(keys []string) map[string]struct{} {
	if len(keys) == 0 {
		return nil
	}
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}
