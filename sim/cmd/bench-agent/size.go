package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

const module = "nodemend.dev/nodemend"

// pkgSize is what one package group costs in the binary.
type pkgSize struct {
	group string
	bytes int64
}

// breakdown attributes an unstripped binary's bytes to package groups: the
// sizes of its code and data symbols, plus each group's share of the
// pc-line table (.gopclntab, not split by symbol) in proportion to its
// code. Groups: a library's module (from the binary's build info), the
// first path element for the standard library, one group for the
// linker's tables of functions and interfaces.
func breakdown(path string) ([]pkgSize, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, err
	}
	modules := []string{bi.Main.Path}
	for _, d := range bi.Deps {
		modules = append(modules, d.Path)
	}
	// Longest first: a package belongs to the longest module path that
	// prefixes it (k8s.io/apimachinery before k8s.io).
	sort.Slice(modules, func(i, j int) bool { return len(modules[i]) > len(modules[j]) })
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	text := map[string]int64{}
	var totalText int64
	for _, s := range syms {
		if s.Size == 0 || int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 {
			continue // .bss and .noptrbss take no room in the file
		}
		g := group(modules, s.Name)
		sizes[g] += int64(s.Size)
		if sec.Name == ".text" {
			text[g] += int64(s.Size)
			totalText += int64(s.Size)
		}
	}
	if pcln := f.Section(".gopclntab"); pcln != nil && totalText > 0 {
		for g, t := range text {
			sizes[g] += int64(float64(pcln.Size) * float64(t) / float64(totalText))
		}
	}
	var out []pkgSize
	for g, b := range sizes {
		out = append(out, pkgSize{g, b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].bytes > out[j].bytes })
	return out, nil
}

// symbolPackage is the import path of a Go symbol's package:
// "k8s.io/api/core/v1.(*Pod).Marshal" → "k8s.io/api/core/v1",
// "type:*github.com/x/y.T" → "github.com/x/y", generic instantiations cut
// at their type arguments.
func symbolPackage(name string) string {
	for _, p := range []string{"type:", "go:itab.", "go:string.", "go:info.", ".eq."} {
		name = strings.TrimPrefix(name, p)
	}
	name = strings.TrimLeft(name, "*")
	if i := strings.IndexAny(name, "[ ,"); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return name
}

func group(modules []string, symbol string) string {
	if !strings.Contains(symbol, ".") {
		return "C and assembly (cgo stubs: NVML)"
	}
	pkg := symbolPackage(symbol)
	if strings.HasPrefix(pkg, "go:") || strings.HasPrefix(pkg, "$") || pkg == "" {
		return "linker tables (go:func.*, constants)"
	}
	for _, m := range modules {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			if m == module {
				return module + " (nodemend's own code)"
			}
			return m
		}
	}
	first, _, _ := strings.Cut(pkg, "/")
	if strings.Contains(first, ".") {
		return pkg // a package of no listed module
	}
	return "std: " + first
}

// buildFloor builds a program that only imports (blank) every library
// package nodemend's packages in the agent import directly, built like
// the agent: its size is what those libraries cost before the agent does
// anything with them (their package-level data, init functions and what
// those reach). It returns the stripped size, the library count and the
// floor's own size by package.
func buildFloor(ctx context.Context, out, tags string) (int64, int, []pkgSize, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", tags, "-json=ImportPath,Imports,Standard", "./cmd/nodemend-agent")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, nil, fmt.Errorf("go list: %w", err)
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Standard   bool
	}
	var pkgs []pkg
	dec := json.NewDecoder(&stdout)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return 0, 0, nil, err
		}
		pkgs = append(pkgs, p)
	}
	std := map[string]bool{}
	for _, p := range pkgs {
		std[p.ImportPath] = p.Standard
	}
	var libs []string
	for _, p := range pkgs {
		if p.ImportPath != module && !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		for _, imp := range p.Imports {
			if imp == "C" || std[imp] || imp == module || strings.HasPrefix(imp, module+"/") || slices.Contains(libs, imp) {
				continue
			}
			libs = append(libs, imp)
		}
	}
	slices.Sort(libs)
	// Inside the module, whatever -out is, so that it builds with the
	// module's versions of the libraries.
	dir := filepath.Join("_output", "bench-agent-floor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, nil, err
	}
	var src strings.Builder
	src.WriteString("// Code generated by bench-agent: the libraries nodemend-agent imports, and nothing else.\npackage main\n\nimport (\n")
	for _, l := range libs {
		fmt.Fprintf(&src, "\t_ %q\n", l)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		return 0, 0, nil, err
	}
	bin := filepath.Join(out, "bin", "floor")
	if err := goBuild(ctx, ".", "build", "-trimpath", "-tags", tags, "-ldflags=-s -w", "-o", bin, "./"+filepath.ToSlash(dir)); err != nil {
		return 0, 0, nil, err
	}
	if err := goBuild(ctx, ".", "build", "-trimpath", "-tags", tags, "-o", bin+".symbols", "./"+filepath.ToSlash(dir)); err != nil {
		return 0, 0, nil, err
	}
	sizes, err := breakdown(bin + ".symbols")
	if err != nil {
		return 0, 0, nil, err
	}
	st, err := os.Stat(bin)
	if err != nil {
		return 0, 0, nil, err
	}
	return st.Size(), len(libs), sizes, nil
}
