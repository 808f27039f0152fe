// Command images builds nodemend's container images without a container
// engine (make images; docs/install.md#images): the agent on a Debian slim
// root file system holding the packages agent.Dockerfile installs, the
// controller and kubectl-mend on a distroless-like static base, and the
// pause and workload images of the real-node test tier. Base root file
// systems come from Debian packages (mmdebstrap, from this machine's apt
// sources), binaries from go build; layers and archives are reproducible
// (same inputs, same digests) and cached by the digest of their inputs.
// With -push, the images go to -registry.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/hack/images/imagebuild"
	"nodemend.dev/nodemend/hack/images/rootfs"
)

type options struct {
	out      string
	registry string
	tag      string
	push     bool
	platform string
	only     string
	cacheDir string
	noCache  bool
	verify   bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "_output/images", "directory for the image archives and images.json")
	flag.StringVar(&o.registry, "registry", "", "registry (and path) the images are named under (default: the chart's image.registry)")
	flag.StringVar(&o.tag, "tag", "", "image tag (default: the chart's appVersion)")
	flag.BoolVar(&o.push, "push", false, "push the images to -registry")
	flag.StringVar(&o.platform, "platform", "linux/"+runtime.GOARCH, "OS/architecture to build for (see docs/install.md#images for arm64)")
	flag.StringVar(&o.only, "images", "", "comma-separated image names to build (default: all)")
	flag.StringVar(&o.cacheDir, "cache", "", "cache directory (default: $NODEMEND_CACHE/images, $NODEMEND_CACHE defaulting to ~/.cache/nodemend)")
	flag.BoolVar(&o.noCache, "no-cache", false, "build every base and binary again, ignoring and not filling the cache")
	flag.BoolVar(&o.verify, "verify-reproducible", false, "after building, build everything again without the cache and fail unless every digest is the same")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log io.Writer) error {
	start := time.Now()
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	if o.push && o.registry == "" {
		return errors.New("-push needs -registry (make images REGISTRY=… TAG=…)")
	}
	registry, tag, err := chartDefaults(root)
	if err != nil {
		return err
	}
	if o.registry != "" {
		registry = o.registry
	}
	if o.tag != "" {
		tag = o.tag
	}
	platform, err := v1.ParsePlatform(o.platform)
	if err != nil {
		return err
	}
	selected, err := selectImages(images(), o.only)
	if err != nil {
		return err
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	if o.cacheDir == "" {
		o.cacheDir = filepath.Join(cacheRoot(), "images")
	}
	b := &builder{
		root: root, platform: *platform, epoch: epoch, log: log,
		cache: imagebuild.Cache{Dir: o.cacheDir, Disabled: o.noCache},
		bases: map[string]builtLayer{},
	}
	results, err := b.buildAll(ctx, selected, registry, tag, o.out)
	defer b.removeUncached()
	if err != nil {
		return err
	}
	printSummary(log, results, time.Since(start))
	// Binaries change with every commit, bases with the Debian release.
	for kind, age := range map[string]time.Duration{"binary": 3 * 24 * time.Hour, "base": 30 * 24 * time.Hour} {
		if err := b.cache.Prune(kind, age); err != nil {
			return err
		}
	}
	if o.verify {
		again := &builder{
			root: root, platform: *platform, epoch: epoch, log: log,
			cache: imagebuild.Cache{Dir: o.cacheDir, Disabled: true},
			bases: map[string]builtLayer{},
		}
		tmp, err := os.MkdirTemp("", "nodemend-images-verify-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintln(log, "building everything again without the cache, to compare digests")
		second, err := again.buildAll(ctx, selected, registry, tag, tmp)
		defer again.removeUncached()
		if err != nil {
			return err
		}
		if diff := compareDigests(results, second); len(diff) > 0 {
			return fmt.Errorf("not reproducible: %s", strings.Join(diff, "; "))
		}
		fmt.Fprintf(log, "reproducible: a build without the cache gave the same %d digests\n", len(second))
	}
	if o.push {
		for _, r := range results {
			if _, err := imagebuild.Push(ctx, r.tag, r.img, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// builder builds the images of one platform.
type builder struct {
	root      string
	platform  v1.Platform
	epoch     time.Time
	log       io.Writer
	cache     imagebuild.Cache
	debian    *rootfs.Debian
	bases     map[string]builtLayer // by base name, built once per run
	layerCode string                // builderKey
	selected  []image
	srcKeys   map[goEnv]map[string]string // sourceKey
	uncached  []string                    // directories of a -no-cache build, removed at the end
}

// builtLayer is a cached layer and how it was made.
type builtLayer struct {
	imagebuild.Layer
	cached bool
}

func (l builtLayer) state() string {
	if l.cached {
		return "cached"
	}
	return "built"
}

// result is one built image.
type result struct {
	Name     string `json:"name"`
	Ref      string `json:"ref"`
	Digest   string `json:"digest"`
	Platform string `json:"platform"`
	User     string `json:"user"`
	Archive  string `json:"archive"`
	Size     int64  `json:"archiveBytes"`

	tag               name.Tag
	img               v1.Image
	base, binaryState string // "built", "cached", "-" (no base)
}

func (b *builder) buildAll(ctx context.Context, selected []image, registry, tag, out string) ([]result, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	b.selected = selected
	var results []result
	for _, im := range selected {
		r, err := b.build(ctx, im, registry, tag, out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Name, err)
		}
		results = append(results, r)
	}
	summary, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "images.json"), append(summary, '\n'), 0o644); err != nil {
		return nil, err
	}
	// The same, one image a line, for shell scripts (hack/images-check.sh).
	var lines strings.Builder
	for _, r := range results {
		fmt.Fprintf(&lines, "%s %s %s %s %s\n", r.Name, r.Ref, r.Digest, r.User, r.Archive)
	}
	return results, os.WriteFile(filepath.Join(out, "images.txt"), []byte(lines.String()), 0o644)
}

func (b *builder) build(ctx context.Context, im image, registry, tagName, out string) (result, error) {
	tag, err := name.NewTag(registry + "/" + im.Name + ":" + tagName)
	if err != nil {
		return result{}, err
	}
	if im.CGO && b.platform.Architecture != runtime.GOARCH {
		return result{}, fmt.Errorf("%s is a cgo binary: building it for %s needs that platform's C toolchain and a %s root file system (docs/install.md#images); this builder does not cross-compile it", im.Name, b.platform.Architecture, b.platform.Architecture)
	}
	var layers []imagebuild.Layer
	baseState := "-"
	if im.Base.Kind != scratchBase {
		base, err := b.base(ctx, im.Base)
		if err != nil {
			return result{}, fmt.Errorf("base %s: %w", im.Base.Name, err)
		}
		layers, baseState = append(layers, base.Layer), base.state()
	}
	bin, err := b.binary(ctx, im)
	if err != nil {
		return result{}, err
	}
	if im.CGO {
		if err := b.checkLinks(im, bin.Layer, layers); err != nil {
			return result{}, err
		}
	}
	layers = append(layers, bin.Layer)
	img, err := imagebuild.Assemble(imagebuild.Config{
		OS: b.platform.OS, Architecture: b.platform.Architecture, Variant: b.platform.Variant,
		User: im.User, Entrypoint: []string{im.BinaryPath}, Env: append(slices.Clip(im.Base.Env), im.Env...),
		Volumes: im.Volumes, ExposedPorts: im.Ports, WorkingDir: im.WorkingDir,
	}, layers, b.epoch)
	if err != nil {
		return result{}, err
	}
	archive := filepath.Join(out, im.Name+".tar")
	size, err := writeFileAtomic(archive, func(w io.Writer) error { return imagebuild.WriteArchive(w, tag, img, b.epoch) })
	if err != nil {
		return result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return result{}, err
	}
	return result{
		Name: im.Name, Ref: tag.Name(), Digest: digest.String(), Platform: b.platform.String(), User: im.User,
		Archive: filepath.Base(archive), Size: size,
		tag: tag, img: img, base: baseState, binaryState: bin.state(),
	}, nil
}

// base returns the layer of a base root file system, from the cache when
// a build with the same inputs made it before.
func (b *builder) base(ctx context.Context, bs base) (builtLayer, error) {
	if l, ok := b.bases[bs.Name]; ok {
		return l, nil
	}
	deb, err := b.debianBuilder(ctx, bs.Release)
	if err != nil {
		return builtLayer{}, err
	}
	builderKey, err := b.builderKey(ctx)
	if err != nil {
		return builtLayer{}, err
	}
	mmdebstrap, err := output(ctx, b.root, nil, "mmdebstrap", "--version")
	if err != nil {
		return builtLayer{}, fmt.Errorf("%w (apt-get install mmdebstrap)", err)
	}
	users, _ := json.Marshal(bs.Users)
	key := imagebuild.Key("base", builderKey, string(mmdebstrap), string(bs.Kind), bs.Release, deb.Arch,
		strings.Join(bs.Packages, ","), string(users), rootfs.Deb822(deb.Sources), strings.Join(deb.AptOptions, "\n"),
		strconv.FormatInt(b.epoch.Unix(), 10))
	layerName := "layer.tar.gz"
	dir, hit, err := b.cache.Ensure("base", key, func(dir string) error {
		fmt.Fprintf(b.log, "base %s: bootstrapping Debian %s/%s with %s (a minute or two; cached afterwards)\n", bs.Name, bs.Release, deb.Arch, strings.Join(bs.Packages, " "))
		var entries []imagebuild.Entry
		var pkgs []rootfs.Package
		var err error
		switch bs.Kind {
		case slimBase:
			entries, pkgs, err = deb.Slim(ctx, bs.Packages)
		case staticBase:
			entries, pkgs, err = deb.Static(ctx, bs.Packages, bs.Users)
		default:
			err = fmt.Errorf("unknown base kind %q", bs.Kind)
		}
		if err != nil {
			return err
		}
		if err := imagebuild.WriteLayerFile(filepath.Join(dir, layerName), entries, b.epoch); err != nil {
			return err
		}
		var list strings.Builder
		for _, p := range pkgs {
			fmt.Fprintln(&list, p)
		}
		return os.WriteFile(filepath.Join(dir, "packages.txt"), []byte(list.String()), 0o644)
	})
	if err != nil {
		return builtLayer{}, err
	}
	b.noteUncached(dir)
	l := builtLayer{Layer: imagebuild.Layer{
		Path:      filepath.Join(dir, layerName),
		CreatedBy: fmt.Sprintf("%s base: Debian %s %s (hack/images)", bs.Kind, bs.Release, strings.Join(bs.Packages, " ")),
	}, cached: hit}
	b.bases[bs.Name] = l
	return l, nil
}

// builderKey digests the code that makes layers (rootfs and imagebuild,
// and the go-containerregistry version): a change to it rebuilds every
// cached layer; a change elsewhere in hack/images (an image's declaration)
// reaches the keys through what it declares.
func (b *builder) builderKey(ctx context.Context) (string, error) {
	if b.layerCode == "" {
		pkgs := []string{"./hack/images/rootfs", "./hack/images/imagebuild"}
		keys, err := sourceKeys(ctx, b.root, goEnv{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}, pkgs...)
		if err != nil {
			return "", err
		}
		b.layerCode = imagebuild.Key(keys[pkgs[0]], keys[pkgs[1]])
	}
	return b.layerCode, nil
}

func (b *builder) debianBuilder(ctx context.Context, release string) (*rootfs.Debian, error) {
	if b.debian != nil && b.debian.Release == release {
		return b.debian, nil
	}
	sources, err := rootfs.HostSources(release)
	if err != nil {
		return nil, err
	}
	opts, err := rootfs.HostAcquireOptions(ctx)
	if err != nil {
		return nil, err
	}
	arch, ok := debianArch[b.platform.Architecture]
	if !ok {
		return nil, fmt.Errorf("no Debian architecture for %s", b.platform)
	}
	b.debian = &rootfs.Debian{Release: release, Arch: arch, Sources: sources, AptOptions: opts, Epoch: b.epoch, Log: b.log}
	return b.debian, nil
}

// debianArch maps GOARCH to Debian's architecture names.
var debianArch = map[string]string{"amd64": "amd64", "arm64": "arm64", "arm": "armhf", "ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64"}

// binary returns the layer holding im's binary.
func (b *builder) binary(ctx context.Context, im image) (builtLayer, error) {
	env := goEnv{GOOS: b.platform.OS, GOARCH: b.platform.Architecture, CGO: im.CGO, Tags: im.Tags}
	src, err := b.sourceKey(ctx, env, im.Package)
	if err != nil {
		return builtLayer{}, err
	}
	builderKey, err := b.builderKey(ctx)
	if err != nil {
		return builtLayer{}, err
	}
	key := imagebuild.Key("binary", builderKey, src, im.Package, im.BinaryPath, strconv.FormatInt(b.epoch.Unix(), 10))
	dir, hit, err := b.cache.Ensure("binary", key, func(dir string) error {
		fmt.Fprintf(b.log, "%s: go build %s (%s, cgo=%v)\n", im.Name, im.Package, env.GOOS+"/"+env.GOARCH, env.CGO)
		bin := filepath.Join(dir, im.binaryName())
		if err := goBuild(ctx, b.root, env, im.Package, bin, b.log); err != nil {
			return err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		layer := imagebuild.FileEntries([]imagebuild.File{{Path: im.BinaryPath, Mode: 0o755, Data: data}})
		if err := imagebuild.WriteLayerFile(filepath.Join(dir, "layer.tar.gz"), layer, b.epoch); err != nil {
			return err
		}
		return os.Remove(bin) // the layer holds it
	})
	if err != nil {
		return builtLayer{}, err
	}
	b.noteUncached(dir)
	flags := strings.Join(buildFlags, " ")
	if im.Tags != "" {
		flags += " -tags=" + im.Tags
	}
	return builtLayer{Layer: imagebuild.Layer{
		Path:      filepath.Join(dir, "layer.tar.gz"),
		CreatedBy: fmt.Sprintf("CGO_ENABLED=%d go build %s %s → %s (hack/images)", map[bool]int{false: 0, true: 1}[im.CGO], flags, im.Package, im.BinaryPath),
	}, cached: hit}, nil
}

// sourceKey is the source key of pkg built in env. The first call for an
// env lists the packages of every selected image built in it at once.
func (b *builder) sourceKey(ctx context.Context, env goEnv, pkg string) (string, error) {
	if k, ok := b.srcKeys[env][pkg]; ok {
		return k, nil
	}
	var pkgs []string
	for _, im := range b.selected {
		if im.CGO == env.CGO && im.Tags == env.Tags && !slices.Contains(pkgs, im.Package) {
			pkgs = append(pkgs, im.Package)
		}
	}
	if !slices.Contains(pkgs, pkg) {
		pkgs = append(pkgs, pkg)
	}
	keys, err := sourceKeys(ctx, b.root, env, pkgs...)
	if err != nil {
		return "", err
	}
	if b.srcKeys == nil {
		b.srcKeys = map[goEnv]map[string]string{}
	}
	b.srcKeys[env] = keys
	return keys[pkg], nil
}

// checkLinks fails when a dynamically linked binary would not start on
// the layers below it (a library or a glibc symbol version missing). A
// pass is remembered beside the cached binary, per base, since reading a
// base takes seconds.
func (b *builder) checkLinks(im image, bin imagebuild.Layer, below []imagebuild.Layer) error {
	var bases []string
	for _, l := range below {
		bases = append(bases, filepath.Base(filepath.Dir(l.Path)))
	}
	marker := filepath.Join(filepath.Dir(bin.Path), "links-checked-"+imagebuild.Key(bases...))
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	var all [][]imagebuild.Entry
	for _, l := range below {
		entries, err := imagebuild.ReadLayerFile(l.Path)
		if err != nil {
			return err
		}
		all = append(all, entries)
	}
	binEntries, err := imagebuild.ReadLayerFile(bin.Path)
	if err != nil {
		return err
	}
	binary, ok := imagebuild.NewTree(binEntries).Resolve(im.BinaryPath)
	if !ok {
		return fmt.Errorf("the layer %s lacks %s", bin.Path, im.BinaryPath)
	}
	if err := imagebuild.CheckDynamicLinks(binary.Data, imagebuild.NewTree(all...)); err != nil {
		return err
	}
	return os.WriteFile(marker, nil, 0o644)
}

func (b *builder) noteUncached(dir string) {
	if b.cache.Disabled {
		b.uncached = append(b.uncached, dir)
	}
}

func (b *builder) removeUncached() {
	for _, d := range b.uncached {
		os.RemoveAll(d)
	}
	b.uncached = nil
}

func selectImages(all []image, only string) ([]image, error) {
	if only == "" {
		return all, nil
	}
	var out []image
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(all, func(im image) bool { return im.Name == strings.TrimSpace(n) })
		if i < 0 {
			var names []string
			for _, im := range all {
				names = append(names, im.Name)
			}
			return nil, fmt.Errorf("no image %q (images: %s)", n, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH, or 0: every timestamp in the
// images (file times, created) is this, so that a build does not depend
// on when it ran. A release pipeline sets it to the release commit's time.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

func cacheRoot() string {
	if d := os.Getenv("NODEMEND_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "nodemend-cache")
	}
	return filepath.Join(home, ".cache", "nodemend")
}

func repoRoot(ctx context.Context) (string, error) {
	out, err := output(ctx, ".", nil, "go", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// chartDefaults are the chart's image.registry and appVersion: images
// built without -registry and -tag carry the names a default `helm
// install` pulls, so a node that imports them runs the chart unchanged.
func chartDefaults(root string) (registry, tag string, err error) {
	var values struct {
		Image struct{ Registry string } `json:"image"`
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	for file, into := range map[string]any{"values.yaml": &values, "Chart.yaml": &chart} {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "nodemend", file))
		if err != nil {
			return "", "", err
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			return "", "", fmt.Errorf("%s: %w", file, err)
		}
	}
	if values.Image.Registry == "" || chart.AppVersion == "" {
		return "", "", errors.New("the chart has no image.registry or appVersion to name the images after")
	}
	return values.Image.Registry, chart.AppVersion, nil
}

// writeFileAtomic writes a file under a temporary name and renames it, so
// that a reader never sees half an archive; it returns the size.
func writeFileAtomic(path string, write func(io.Writer) error) (int64, error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, err
	}
	err = write(f)
	var info os.FileInfo
	if err == nil {
		info, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return info.Size(), nil
}

func compareDigests(a, b []result) []string {
	var diff []string
	for i := range a {
		if a[i].Digest != b[i].Digest {
			diff = append(diff, fmt.Sprintf("%s: %s, then %s", a[i].Name, a[i].Digest, b[i].Digest))
		}
	}
	return diff
}

func printSummary(w io.Writer, results []result, took time.Duration) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%-24s %-10s %-8s %-8s %s\n", "IMAGE", "SIZE", "BASE", "BINARY", "DIGEST")
	for _, r := range results {
		fmt.Fprintf(&buf, "%-24s %-10s %-8s %-8s %s\n", r.Name, fmt.Sprintf("%.1fMB", float64(r.Size)/1e6), r.base, r.binaryState, r.Digest)
	}
	fmt.Fprintf(&buf, "%d images in %s\n", len(results), took.Round(100*time.Millisecond))
	w.Write(buf.Bytes())
}
