package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"nodemend.dev/nodemend/hack/images/imagebuild"
)

// SlimPaths are the dpkg path filters of a slim Debian image (what
// debian:RELEASE-slim leaves out: documentation but the copyright files,
// manual pages, info pages, translations), applied in order, the last
// matching one deciding, as dpkg applies --path-exclude/--path-include.
// The slim rootfs keeps them in /etc/dpkg/dpkg.cfg.d, so packages
// installed on top of the image are slimmed too.
var SlimPaths = []PathFilter{
	{Exclude: true, Glob: "/usr/share/doc/*"},
	{Glob: "/usr/share/doc/*/copyright"},
	{Exclude: true, Glob: "/usr/share/man/*"},
	{Exclude: true, Glob: "/usr/share/info/*"},
	{Exclude: true, Glob: "/usr/share/locale/*"},
	{Exclude: true, Glob: "/usr/share/lintian/*"},
	{Exclude: true, Glob: "/usr/share/linda/*"},
}

// PathFilter is one dpkg path-exclude or path-include option.
type PathFilter struct {
	Exclude bool
	Glob    string // dpkg's glob: * matches any run of characters, / included
}

func (f PathFilter) dpkgOption() string {
	if f.Exclude {
		return "path-exclude=" + f.Glob
	}
	return "path-include=" + f.Glob
}

// Excluder returns whether the filters leave a layer entry name out.
func Excluder(filters []PathFilter) func(name string) bool {
	res := make([]*regexp.Regexp, len(filters))
	for i, f := range filters {
		res[i] = regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(f.Glob), `\*`, ".*") + "$")
	}
	return func(name string) bool {
		out := false
		for i, re := range res {
			if re.MatchString("/" + name) {
				out = filters[i].Exclude
			}
		}
		return out
	}
}

// BuildMachineFile reports whether an entry of a freshly bootstrapped root
// file system describes the machine that built it rather than the image:
// its host name, resolver and hosts files (the container runtime provides
// them), the apt sources and options that reach this machine's mirror and
// proxy, device nodes (the runtime mounts /dev), and logs and backups that
// record the time of the build.
func BuildMachineFile(name string) bool {
	switch name {
	case "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/apt/sources.list",
		"etc/apt/apt.conf.d/99mmdebstrap", "var/cache/ldconfig/aux-cache":
		return true
	}
	for _, dir := range []string{"dev/", "tmp/", "etc/apt/sources.list.d/", "var/log/apt/", "var/lib/apt/lists/", "var/cache/apt/"} {
		if strings.HasPrefix(name, dir) && !isAptLockOrPartial(name) {
			return true
		}
	}
	if strings.HasPrefix(name, "var/log/") && strings.HasSuffix(name, ".log") {
		return true
	}
	if (strings.HasPrefix(name, "var/cache/debconf/") || strings.HasPrefix(name, "var/lib/dpkg/")) && strings.HasSuffix(name, "-old") {
		return true
	}
	return false
}

// isAptLockOrPartial keeps the empty lock files and partial/ directories
// apt expects under its list and archive directories (as debian images
// have them).
func isAptLockOrPartial(name string) bool {
	for _, dir := range []string{"var/lib/apt/lists/", "var/cache/apt/archives/"} {
		if rest, ok := strings.CutPrefix(name, dir); ok && (rest == "lock" || rest == "partial") {
			return true
		}
	}
	return name == "var/cache/apt/archives"
}

// Debian builds root file systems of one Debian release and architecture.
type Debian struct {
	Release    string // "bookworm"
	Arch       string // Debian architecture: "amd64", "arm64"
	Sources    []Source
	AptOptions []string  // mmdebstrap --aptopt values (AcquireOptions)
	Epoch      time.Time // SOURCE_DATE_EPOCH: timestamps written during the build
	Log        io.Writer // mmdebstrap's progress
}

// Package is one installed Debian package.
type Package struct{ Name, Version, Architecture string }

func (p Package) String() string { return p.Name + "=" + p.Version + " (" + p.Architecture + ")" }

// Slim bootstraps the package set of debian:RELEASE-slim (Priority:
// required, and apt) plus packages and their dependencies, without
// recommended packages (like `apt-get install --no-install-recommends`),
// with SlimPaths applied, and returns its entries without build-machine
// files, and the installed packages.
func (d Debian) Slim(ctx context.Context, packages []string) (entries []imagebuild.Entry, installed []Package, err error) {
	err = inWorkDir(func(dir string) error {
		entries, installed, err = d.slim(ctx, dir, packages)
		return err
	})
	return entries, installed, err
}

func (d Debian) slim(ctx context.Context, dir string, packages []string) ([]imagebuild.Entry, []Package, error) {
	out := filepath.Join(dir, "rootfs.tar")
	args := []string{"--variant=minbase", "--format=tar", "--include=" + strings.Join(packages, ",")}
	for _, f := range SlimPaths {
		args = append(args, "--dpkgopt="+f.dpkgOption())
	}
	if err := d.mmdebstrap(ctx, dir, out, args...); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	all, err := imagebuild.ReadTar(f)
	if err != nil {
		return nil, nil, err
	}
	var entries []imagebuild.Entry
	var status []byte
	for _, e := range all {
		if e.Header.Name == "var/lib/dpkg/status" {
			status = e.Data
		}
		if !BuildMachineFile(e.Header.Name) {
			entries = append(entries, e)
		}
	}
	installed := InstalledPackages(status)
	for _, p := range packages {
		if !slices.ContainsFunc(installed, func(i Package) bool { return i.Name == p }) {
			return nil, nil, fmt.Errorf("package %s is not installed in the bootstrapped root file system", p)
		}
	}
	return entries, installed, nil
}

// InstalledPackages lists the installed packages of a dpkg status file.
func InstalledPackages(status []byte) []Package {
	var out []Package
	for _, para := range bytes.Split(status, []byte("\n\n")) {
		f := controlFields(para)
		if f["Package"] != "" && strings.HasSuffix(f["Status"], " installed") {
			out = append(out, Package{Name: f["Package"], Version: f["Version"], Architecture: f["Architecture"]})
		}
	}
	slices.SortFunc(out, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func controlFields(para []byte) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(string(para), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && line != "" && line[0] != ' ' {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// User is an account of a static base: an /etc/passwd and /etc/group
// entry (a group of the same name and id) and a home directory it owns.
type User struct {
	Name     string
	UID, GID int
	Home     string
}

// Static assembles the base of a static binary the way distroless's
// static image is made: the files of packages only (no dependencies, no
// maintainer scripts, SlimPaths applied), the CA bundle that
// ca-certificates' maintainer script would generate, the users' passwd,
// group and home directories, a sticky /tmp, and, for vulnerability
// scanners, each package's control file under /var/lib/dpkg/status.d.
func (d Debian) Static(ctx context.Context, packages []string, users []User) (entries []imagebuild.Entry, installed []Package, err error) {
	err = inWorkDir(func(dir string) error {
		entries, installed, err = d.static(ctx, dir, packages, users)
		return err
	})
	return entries, installed, err
}

func (d Debian) static(ctx context.Context, dir string, packages []string, users []User) ([]imagebuild.Entry, []Package, error) {
	root := filepath.Join(dir, "extract")
	// The extract variant unpacks the packages and their dependencies
	// without installing anything; the .debs it fetched stay in its apt
	// cache, and only the asked-for ones are used.
	if err := d.mmdebstrap(ctx, dir, root, "--variant=extract", "--format=directory", "--skip=cleanup/apt/cache", "--include="+strings.Join(packages, ",")); err != nil {
		return nil, nil, err
	}
	archives := filepath.Join(root, "var", "cache", "apt", "archives")
	debs, err := os.ReadDir(archives)
	if err != nil {
		return nil, nil, err
	}
	excluded := Excluder(SlimPaths)
	var entries []imagebuild.Entry
	var installed []Package
	for _, pkg := range packages {
		i := slices.IndexFunc(debs, func(e os.DirEntry) bool {
			return strings.HasPrefix(e.Name(), pkg+"_") && strings.HasSuffix(e.Name(), ".deb")
		})
		if i < 0 {
			return nil, nil, fmt.Errorf("mmdebstrap fetched no .deb of %s", pkg)
		}
		deb := filepath.Join(archives, debs[i].Name())
		data, err := dpkgDeb(ctx, "--fsys-tarfile", deb)
		if err != nil {
			return nil, nil, err
		}
		files, err := imagebuild.ReadTar(bytes.NewReader(data))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", deb, err)
		}
		for _, e := range files {
			// Directories stay, as dpkg keeps them: an included file
			// (a copyright) may live in one.
			if e.Header.Typeflag == tar.TypeDir || !excluded(e.Header.Name) {
				entries = append(entries, e)
			}
		}
		control, err := dpkgDeb(ctx, "--field", deb)
		if err != nil {
			return nil, nil, err
		}
		f := controlFields(control)
		installed = append(installed, Package{Name: f["Package"], Version: f["Version"], Architecture: f["Architecture"]})
		entries = append(entries, imagebuild.FileEntries([]imagebuild.File{{Path: "/var/lib/dpkg/status.d/" + pkg, Mode: 0o644, Data: control}})...)
	}
	entries = append(entries, imagebuild.FileEntries(StaticFiles(entries, users))...)
	return entries, installed, nil
}

// StaticFiles are the files a static base adds to its packages' files:
// the CA bundle (every certificate under /usr/share/ca-certificates, in
// name order, as update-ca-certificates concatenates them with the default
// configuration), passwd, group, nsswitch.conf, home directories, /tmp.
func StaticFiles(pkgFiles []imagebuild.Entry, users []User) []imagebuild.File {
	var certs []imagebuild.Entry
	for _, e := range pkgFiles {
		if strings.HasPrefix(e.Header.Name, "usr/share/ca-certificates/") && strings.HasSuffix(e.Header.Name, ".crt") && e.Header.Typeflag == tar.TypeReg {
			certs = append(certs, e)
		}
	}
	slices.SortFunc(certs, func(a, b imagebuild.Entry) int { return strings.Compare(a.Header.Name, b.Header.Name) })
	var bundle bytes.Buffer
	for _, c := range certs {
		bundle.Write(c.Data)
		if !bytes.HasSuffix(c.Data, []byte("\n")) {
			bundle.WriteByte('\n')
		}
	}
	var passwd, group strings.Builder
	files := []imagebuild.File{
		{Path: "/etc/ssl/certs", Dir: true, Mode: 0o755},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: bundle.Bytes()},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}
	for _, u := range users {
		fmt.Fprintf(&passwd, "%s:x:%d:%d:%s:%s:/sbin/nologin\n", u.Name, u.UID, u.GID, u.Name, u.Home)
		fmt.Fprintf(&group, "%s:x:%d:\n", u.Name, u.GID)
		if u.Home != "/nonexistent" {
			files = append(files, imagebuild.File{Path: u.Home, Dir: true, Mode: 0o700, UID: u.UID, GID: u.GID})
		}
	}
	return append(files,
		imagebuild.File{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd.String())},
		imagebuild.File{Path: "/etc/group", Mode: 0o644, Data: []byte(group.String())},
	)
}

func dpkgDeb(ctx context.Context, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "dpkg-deb", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// inWorkDir runs build in a new temporary directory outside the cache
// (apt's unprivileged download user must reach it, and a crashed build
// leaves nothing in the cache) and removes the directory afterwards.
func inWorkDir(build func(dir string) error) (err error) {
	dir, err := os.MkdirTemp("", "nodemend-rootfs-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := removeWorkDir(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil { // for apt's _apt user
		return err
	}
	return build(dir)
}

// removeWorkDir unmounts whatever a killed mmdebstrap left mounted under
// dir (its chroot's /proc, /sys, /dev/pts), deepest first, before
// removing it: removing through a mount would reach the host's files.
func removeWorkDir(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var under []string
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			under = append(under, f[4])
		}
	}
	slices.Sort(under)
	slices.Reverse(under)
	for _, m := range under {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s before removing %s: %w", m, dir, err)
		}
	}
	return os.RemoveAll(dir)
}

// mmdebstrap runs mmdebstrap for this release and architecture, from a
// sources file written into workDir, with SOURCE_DATE_EPOCH set. On
// cancellation it gets SIGTERM, so that it unmounts and removes its
// temporary root before exiting.
func (d Debian) mmdebstrap(ctx context.Context, workDir, target string, args ...string) error {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return fmt.Errorf("mmdebstrap is not installed (apt-get install mmdebstrap): %w", err)
	}
	if len(d.Sources) == 0 {
		return fmt.Errorf("no apt source of Debian %s on this machine (looked for Types: deb, Suites: %s[-*], Components: main in /etc/apt/sources.list and /etc/apt/sources.list.d)", d.Release, d.Release)
	}
	sources := filepath.Join(workDir, "debian.sources")
	if err := os.WriteFile(sources, []byte(Deb822(d.Sources)), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(workDir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	full := append([]string{"--mode=auto", "--architectures=" + d.Arch}, args...)
	for _, o := range d.AptOptions {
		full = append(full, "--aptopt="+o)
	}
	full = append(full, d.Release, target, sources)
	cmd := exec.CommandContext(ctx, "mmdebstrap", full...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(d.Epoch.Unix(), 10), "TMPDIR="+tmp, "LC_ALL=C.UTF-8")
	cmd.Stdout, cmd.Stderr = d.Log, d.Log
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s: %w", strings.Join(full, " "), err)
	}
	return nil
}

// HostSources reads this machine's apt sources (/etc/apt/sources.list and
// the .list and .sources files of /etc/apt/sources.list.d) and keeps those
// of release (ForRelease).
func HostSources(release string) ([]Source, error) {
	files := []string{"/etc/apt/sources.list"}
	more, err := filepath.Glob("/etc/apt/sources.list.d/*")
	if err != nil {
		return nil, err
	}
	slices.Sort(more)
	files = append(files, more...)
	var all []Source
	for _, f := range files {
		if !strings.HasSuffix(f, ".list") && !strings.HasSuffix(f, ".sources") {
			continue // apt ignores other names (*.disabled, *.save)
		}
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s, err := ParseSources(f, data)
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return ForRelease(all, release), nil
}

// HostAcquireOptions are this machine's apt Acquire options that
// mmdebstrap needs (AcquireOptions of `apt-config dump`).
func HostAcquireOptions(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "apt-config", "dump").Output()
	if err != nil {
		return nil, fmt.Errorf("apt-config dump: %w", err)
	}
	return AcquireOptions(out), nil
}
