package testenv

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
)

// The engines whose CRDs repair tests install. Their CRDs are not copied into
// this repository: they are read from the engines' own module zips, fetched by
// the go command (module proxy, checksum database, module cache) at these
// pinned versions. The Go packages are never imported (Karpenter needs a newer
// Go than this module).
const (
	KarpenterModule   = "sigs.k8s.io/karpenter"
	KarpenterVersion  = "v1.15.0"
	ClusterAPIModule  = "sigs.k8s.io/cluster-api"
	ClusterAPIVersion = "v1.14.2"
)

// engineCRDs lists the files taken from each module zip.
var engineCRDs = []struct {
	module, version string
	files           []string
}{
	{KarpenterModule, KarpenterVersion, []string{
		"pkg/apis/crds/karpenter.sh_nodeclaims.yaml",
		"pkg/apis/crds/karpenter.sh_nodepools.yaml",
	}},
	{ClusterAPIModule, ClusterAPIVersion, []string{
		"core/config/crd/bases/cluster.x-k8s.io_machines.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinesets.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml",
	}},
}

var (
	engineOnce sync.Once
	engineDir  string
	engineErr  error
)

// EngineCRDs returns a directory holding only the Karpenter (NodeClaim,
// NodePool) and Cluster API (Machine, MachineSet, MachineDeployment) CRDs, for
// Options.CRDDirectoryPaths. The directory is created once per process, in
// the system temp directory, and left for the OS to clean.
func EngineCRDs() (string, error) {
	engineOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodemend-engine-crds-")
		if err != nil {
			engineErr = err
			return
		}
		for _, m := range engineCRDs {
			if err := extractModuleFiles(m.module, m.version, m.files, dir); err != nil {
				engineErr = err
				return
			}
		}
		engineDir = dir
	})
	return engineDir, engineErr
}

// extractModuleFiles copies files (paths inside the module) out of the module
// zip that `go mod download` verified and cached.
func extractModuleFiles(module, version string, files []string, dir string) error {
	zipPath, err := moduleZip(module, version)
	if err != nil {
		return err
	}
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return fmt.Errorf("opening %s: %w", zipPath, err)
	}
	defer zr.Close()
	prefix := module + "@" + version + "/"
	want := map[string]bool{}
	for _, f := range files {
		want[prefix+f] = true
	}
	for _, f := range zr.File {
		if !want[f.Name] {
			continue
		}
		delete(want, f.Name)
		rc, err := f.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("reading %s from %s: %w", f.Name, zipPath, err)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(f.Name)), data, 0o644); err != nil {
			return err
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("%s@%s lacks %v", module, version, want)
	}
	return nil
}

// moduleZip runs `go mod download -json` and returns the verified zip in the
// module cache. The zip is used rather than the extracted directory because
// the go command refuses to extract a module that needs a newer Go than the
// running one (Karpenter), after it has downloaded and verified the zip.
func moduleZip(module, version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = os.TempDir() // outside any module: the version is explicit
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run() // non-zero also for the Go version refusal; judged below
	var info struct {
		Zip   string
		Sum   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v %v\n%s", module, version, runErr, err, stderr.Bytes())
	}
	if info.Zip == "" || info.Sum == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s %s", module, version, info.Error, stderr.Bytes())
	}
	if _, err := os.Stat(info.Zip); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %s (%v)", module, version, info.Error, err)
	}
	return info.Zip, nil
}
