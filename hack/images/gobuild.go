package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"nodemend.dev/nodemend/hack/images/imagebuild"
)

// goEnv is the environment a binary is built in: what decides which files
// of a package are compiled and how.
type goEnv struct {
	GOOS, GOARCH string
	CGO          bool
	Tags         string // build tags (-tags), comma-separated
}

// buildFlags are the go build flags of every image binary: the Dockerfiles'
// flags (-trimpath, -ldflags="-s -w"; the agreement test checks that they
// agree), and no VCS stamp, so that the binary depends on its sources only.
var buildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// cgoCFlags are the Makefile's C flags for the agent's cgo build.
const cgoCFlags = "-O2 -Wno-deprecated-declarations"

func (e goEnv) environ() []string {
	env := append(os.Environ(), "GOOS="+e.GOOS, "GOARCH="+e.GOARCH, "CGO_ENABLED=0")
	if e.CGO {
		env = append(env, "CGO_ENABLED=1", "CGO_CFLAGS="+cgoCFlags)
	}
	return env
}

// goPackage is what `go list -json` says about a package.
type goPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	DepOnly    bool
	Deps       []string
	Module     *struct {
		Path, Version string
		Main          bool
		Replace       *struct{ Path, Version string }
	}
	GoFiles, CgoFiles, CFiles, CXXFiles, HFiles, SFiles, SysoFiles, EmbedFiles []string
}

// sourceKeys digests, for each of pkgs (directories relative to root,
// "./cmd/x"), everything a build of it in env reads: the Go toolchain, the
// C toolchain and libc for cgo, go.mod and go.sum, each dependency
// module's path and version, and the content of every file the module's
// own packages (and locally replaced modules) compile or embed. One `go
// list` serves all of pkgs.
func sourceKeys(ctx context.Context, root string, env goEnv, pkgs ...string) (map[string]string, error) {
	common, err := toolchainDigest(ctx, root, env)
	if err != nil {
		return nil, err
	}
	out, err := output(ctx, root, env.environ(), "go", append([]string{"list", "-deps", "-json", "-tags=" + env.Tags}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	digests := map[string]string{}
	byDir := map[string]goPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		if p.Standard {
			continue
		}
		d, err := packageDigest(p)
		if err != nil {
			return nil, err
		}
		digests[p.ImportPath] = d
		if !p.DepOnly {
			byDir[p.Dir] = p
		}
	}
	keys := map[string]string{}
	for _, pkg := range pkgs {
		p, ok := byDir[filepath.Join(root, pkg)]
		if !ok {
			return nil, fmt.Errorf("go list did not report %s", pkg)
		}
		parts := []string{common, p.ImportPath, digests[p.ImportPath]}
		for _, d := range p.Deps { // sorted by go list
			if dd, ok := digests[d]; ok {
				parts = append(parts, d, dd)
			}
		}
		keys[pkg] = imagebuild.Key(parts...)
	}
	return keys, nil
}

// toolchainDigest digests what every build in env shares.
func toolchainDigest(ctx context.Context, root string, env goEnv) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "goenv %s/%s cgo=%v tags=%q flags=%q GOFLAGS=%q\n", env.GOOS, env.GOARCH, env.CGO, env.Tags, buildFlags, os.Getenv("GOFLAGS"))
	version, err := output(ctx, root, env.environ(), "go", "env", "GOVERSION", "CC", "CGO_CFLAGS")
	if err != nil {
		return "", err
	}
	h.Write(version)
	if env.CGO {
		cc := strings.Fields(strings.Split(string(version), "\n")[1])
		if len(cc) == 0 {
			return "", errors.New("cgo build without a C compiler (go env CC is empty)")
		}
		ccVersion, err := output(ctx, root, env.environ(), cc[0], "--version")
		if err != nil {
			return "", fmt.Errorf("the C compiler for cgo: %w", err)
		}
		h.Write(ccVersion)
		libc, err := output(ctx, root, env.environ(), cc[0], "-print-file-name=libc.so.6")
		if err != nil {
			return "", err
		}
		if err := hashFile(h, strings.TrimSpace(string(libc))); err != nil {
			return "", fmt.Errorf("the libc the C compiler links against: %w", err)
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, filepath.Join(root, f)); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// packageDigest digests one package: a dependency module's version (go.sum
// pins its content), or the files of a package of this module.
func packageDigest(p goPackage) (string, error) {
	h := sha256.New()
	if m := p.Module; m != nil && !m.Main && (m.Replace == nil || m.Replace.Version != "") {
		fmt.Fprintf(h, "module %s@%s\n", m.Path, m.Version)
		if m.Replace != nil {
			fmt.Fprintf(h, "replaced by %s@%s\n", m.Replace.Path, m.Replace.Version)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var files []string
	for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.SysoFiles, p.EmbedFiles} {
		files = append(files, list...)
	}
	slices.Sort(files)
	for _, f := range files {
		fmt.Fprintf(h, "file %s\n", f)
		if err := hashFile(h, filepath.Join(p.Dir, f)); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s %x\n", filepath.Base(name), sum.Sum(nil))
	return nil
}

// goBuild builds pkg into out.
func goBuild(ctx context.Context, root string, env goEnv, pkg, out string, log io.Writer) error {
	args := append([]string{"build"}, buildFlags...)
	if env.Tags != "" {
		args = append(args, "-tags="+env.Tags)
	}
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = root, env.environ()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (GOOS=%s GOARCH=%s cgo=%v): %w", strings.Join(args, " "), env.GOOS, env.GOARCH, env.CGO, err)
	}
	return nil
}

func output(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
