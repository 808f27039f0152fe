package realnode

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Images are the locally built images the node runs, by role, as
// references (registry/repository:tag).
type Images struct {
	Agent, Controller, Pause, Workload string
	// Files are the tarballs to import.
	Files []string
}

// findImages reads the image references out of every tarball in dir (OCI
// image layouts or docker save archives) and assigns them their roles by
// repository name: nodemend-agent, nodemend-controller, the pause image
// (nodemend-pause, or any *pause) and the test workload (*workload).
func findImages(dir string) (Images, error) {
	var imgs Images
	files, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	sort.Strings(files)
	if len(files) == 0 {
		return imgs, fmt.Errorf("no image tarballs in %s: build them with make images", dir)
	}
	for _, f := range files {
		refs, err := tarballRefs(f)
		if err != nil {
			return imgs, fmt.Errorf("%s: %w", f, err)
		}
		if len(refs) == 0 {
			return imgs, fmt.Errorf("%s names no image (no io.containerd.image.name or org.opencontainers.image.ref.name annotation, no RepoTags)", f)
		}
		imgs.Files = append(imgs.Files, f)
		for _, r := range refs {
			switch name := repositoryName(r); {
			case name == "nodemend-agent":
				imgs.Agent = r
			case name == "nodemend-controller":
				imgs.Controller = r
			case strings.HasSuffix(name, "pause"):
				imgs.Pause = r
			case strings.HasSuffix(name, "workload"):
				imgs.Workload = r
			}
		}
	}
	var missing []string
	for role, r := range map[string]string{"nodemend-agent": imgs.Agent, "nodemend-controller": imgs.Controller, "pause": imgs.Pause} {
		if r == "" {
			missing = append(missing, role)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return imgs, fmt.Errorf("no %s image among %s: make images builds them", strings.Join(missing, ", "), dir)
	}
	return imgs, nil
}

// repositoryName is the last path element of a reference's repository.
func repositoryName(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	base := path.Base(ref)
	if i := strings.IndexByte(base, ':'); i >= 0 {
		base = base[:i]
	}
	return base
}

// tarballRefs lists the image references an image tarball names.
func tarballRefs(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var refs []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return refs, nil
		}
		if err != nil {
			return nil, err
		}
		switch path.Clean(h.Name) {
		case "index.json":
			var idx struct {
				Manifests []struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"manifests"`
			}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
				return nil, fmt.Errorf("index.json: %w", err)
			}
			for _, m := range idx.Manifests {
				if r := m.Annotations["io.containerd.image.name"]; r != "" {
					refs = append(refs, r)
				} else if r := m.Annotations["org.opencontainers.image.ref.name"]; strings.ContainsAny(r, "/:") {
					refs = append(refs, r)
				}
			}
		case "manifest.json":
			var ms []struct{ RepoTags []string }
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&ms); err != nil {
				return nil, fmt.Errorf("manifest.json: %w", err)
			}
			for _, m := range ms {
				refs = append(refs, m.RepoTags...)
			}
		}
	}
}

// importImages imports every tarball into the CRI namespace and checks
// that the runtime sees each role's image.
func (l Layout) importImages(ctx context.Context, imgs Images) error {
	for _, f := range imgs.Files {
		if out, err := l.ctr(ctx, "images", "import", f); err != nil {
			return fmt.Errorf("importing %s: %v: %s", f, err, out)
		}
	}
	out, err := l.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return fmt.Errorf("listing images: %v: %s", err, out)
	}
	have := map[string]bool{}
	for _, r := range strings.Fields(string(out)) {
		have[r] = true
	}
	for _, r := range []string{imgs.Agent, imgs.Controller, imgs.Pause, imgs.Workload} {
		if r != "" && !have[r] && !have["docker.io/"+r] && !have["docker.io/library/"+r] {
			return fmt.Errorf("image %s is not in containerd after the import (it has: %s)", r, strings.Join(strings.Fields(string(out)), ", "))
		}
	}
	data, _ := json.MarshalIndent(imgs, "", "  ")
	return os.WriteFile(filepath.Join(l.State, "images.json"), data, 0o644)
}

// LoadImages reads the images a running node was started with.
func (l Layout) LoadImages() (Images, error) {
	var imgs Images
	data, err := os.ReadFile(filepath.Join(l.State, "images.json"))
	if err != nil {
		return imgs, err
	}
	return imgs, json.Unmarshal(data, &imgs)
}
