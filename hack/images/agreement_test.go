package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/deploy/deploytest"
	"nodemend.dev/nodemend/hack/images/rootfs"
)

// dockerfileImage is what a Dockerfile declares about the image it builds,
// read from its instructions.
type dockerfileImage struct {
	BaseKind baseKind
	Release  string
	Packages []string
	// Recommends: the final stage's apt-get install also installs
	// recommended packages (no --no-install-recommends).
	Recommends bool
	CGO        bool
	Package    string
	BuildFlags []string // -trimpath, -ldflags=…
	Tags       string   // -tags
	BinaryPath string
	User       string
	Entrypoint []string
	Env        []string
	Volumes    []string
	Ports      []string
	WorkingDir string
	// Unsupported lists what the final stage does that hack/images has
	// no counterpart for (a command other than apt's, CMD, LABEL, a file
	// added other than the binary): each is a disagreement.
	Unsupported []string
}

// debianReleases maps Debian version numbers (in distroless image names)
// to release names.
var debianReleases = map[string]string{"11": "bullseye", "12": "bookworm", "13": "trixie"}

var (
	slimFrom       = regexp.MustCompile(`^debian:([a-z]+)-slim$`)
	distrolessFrom = regexp.MustCompile(`/distroless/static-debian(\d+)(:nonroot)?$`)
	goBuildOut     = regexp.MustCompile(`-o\s+(\S+)`)
	ldflags        = regexp.MustCompile(`-ldflags=("[^"]*"|'[^']*'|\S+)`)
	tagsFlag       = regexp.MustCompile(`-tags[= ]("[^"]*"|'[^']*'|\S+)`)
)

// readDockerfile reads the declarations of a nodemend Dockerfile: a build
// stage running go build, and a final stage copying its output onto a
// Debian slim or distroless static base.
func readDockerfile(data []byte) (dockerfileImage, error) {
	var d dockerfileImage
	ins := deploytest.ParseDockerfile(data)
	if len(ins) == 0 {
		return d, fmt.Errorf("no instructions")
	}
	args := map[string]string{}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string { return args[k] })
	}
	last := ins[len(ins)-1].Stage
	buildOut := ""
	for _, i := range ins {
		final := i.Stage == last
		switch i.Cmd {
		case "ARG":
			for _, a := range strings.Fields(i.Args) {
				if k, v, ok := strings.Cut(a, "="); ok {
					args[k] = v
				}
			}
		case "FROM":
			if !final {
				continue
			}
			from := expand(strings.Fields(i.Args)[0])
			if m := slimFrom.FindStringSubmatch(from); m != nil {
				d.BaseKind, d.Release = slimBase, m[1]
			} else if m := distrolessFrom.FindStringSubmatch(from); m != nil {
				d.BaseKind, d.Release = staticBase, debianReleases[m[1]]
			} else if from == "scratch" {
				d.BaseKind = scratchBase
			} else {
				return d, fmt.Errorf("final stage FROM %s: not a Debian slim, distroless static or scratch base", from)
			}
		case "RUN":
			if !final && strings.Contains(i.Args, "go build") {
				d.CGO = strings.Contains(i.Args, "CGO_ENABLED=1")
				_, cmdline, _ := strings.Cut(i.Args, "go build")
				fields := strings.Fields(cmdline)
				d.Package = fields[len(fields)-1]
				if strings.Contains(cmdline, "-trimpath") {
					d.BuildFlags = append(d.BuildFlags, "-trimpath")
				}
				if m := ldflags.FindStringSubmatch(cmdline); m != nil {
					d.BuildFlags = append(d.BuildFlags, "-ldflags="+strings.Trim(m[1], `"'`))
				}
				if m := tagsFlag.FindStringSubmatch(cmdline); m != nil {
					d.Tags = strings.Trim(m[1], `"'`)
				}
				if m := goBuildOut.FindStringSubmatch(cmdline); m != nil {
					buildOut = m[1]
				}
			}
			if final {
				d.readFinalRun(i.Args)
			}
		case "COPY":
			f := strings.Fields(i.Args)
			switch {
			case !final:
			case len(f) == 3 && strings.HasPrefix(f[0], "--from=") && f[1] == buildOut && d.BinaryPath == "":
				d.BinaryPath = f[2]
			default:
				d.Unsupported = append(d.Unsupported, "COPY "+i.Args)
			}
		case "USER":
			if final {
				d.User = i.Args
			}
		case "ENTRYPOINT":
			if final {
				d.Entrypoint = nil
				if err := json.Unmarshal([]byte(i.Args), &d.Entrypoint); err != nil {
					return d, fmt.Errorf("ENTRYPOINT %s: want the exec (JSON) form: %w", i.Args, err)
				}
			}
		case "ENV":
			if final {
				d.Env = append(d.Env, strings.Fields(expand(i.Args))...)
			}
		case "VOLUME":
			if final {
				var v []string
				if json.Unmarshal([]byte(i.Args), &v) != nil {
					v = strings.Fields(i.Args)
				}
				d.Volumes = append(d.Volumes, v...)
			}
		case "EXPOSE":
			if final {
				d.Ports = append(d.Ports, strings.Fields(i.Args)...)
			}
		case "WORKDIR":
			if final {
				d.WorkingDir = i.Args
			}
		default: // CMD, LABEL, ADD, SHELL, HEALTHCHECK, STOPSIGNAL, ONBUILD
			if final {
				d.Unsupported = append(d.Unsupported, i.Cmd+" "+i.Args)
			}
		}
	}
	return d, nil
}

// readFinalRun reads a RUN of the final stage: hack/images installs
// packages as apt-get does, so the commands it understands are apt-get
// update, install (the packages) and clean, and removing apt's lists and
// archives; any other command is unsupported.
func (d *dockerfileImage) readFinalRun(run string) {
	for _, cmd := range deploytest.ShellCommands(run) {
		if a, ok := deploytest.ReadApt(cmd); ok {
			switch a.Subcommand {
			case "install":
				d.Packages = append(d.Packages, a.Args...)
				if !slices.ContainsFunc(a.Options, noRecommends) {
					d.Recommends = true
				}
				continue
			case "update", "clean":
				continue
			}
		} else if cmd[0] == "rm" && aptCleanup(cmd[1:]) {
			continue
		}
		d.Unsupported = append(d.Unsupported, "RUN "+strings.Join(cmd, " "))
	}
}

// noRecommends reports whether an apt option turns recommended packages off.
func noRecommends(opt string) bool {
	switch strings.ToLower(opt) {
	case "--no-install-recommends", "-o=apt::install-recommends=false", "-o=apt::install-recommends=0":
		return true
	}
	return false
}

// aptCleanup reports whether rm's arguments remove only apt's package
// lists and downloaded archives (which the builder leaves out too).
func aptCleanup(args []string) bool {
	paths := 0
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if !strings.HasPrefix(a, "/var/lib/apt/lists/") && !strings.HasPrefix(a, "/var/cache/apt/") {
			return false
		}
		paths++
	}
	return paths > 0
}

// disagreements lists where the Dockerfile and the no-Docker build's
// declaration of an image differ.
func disagreements(im image, d dockerfileImage) []string {
	var out []string
	differ := func(what string, docker, builder any) {
		out = append(out, fmt.Sprintf("%s: the Dockerfile says %v, hack/images says %v", what, docker, builder))
	}
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	if d.BaseKind != im.Base.Kind || d.Release != im.Base.Release {
		differ("base", string(d.BaseKind)+" "+d.Release, string(im.Base.Kind)+" "+im.Base.Release)
	}
	if d.BaseKind == slimBase && !slices.Equal(sorted(d.Packages), sorted(im.Base.Packages)) {
		differ("packages", sorted(d.Packages), sorted(im.Base.Packages))
	}
	if d.Recommends {
		out = append(out, "recommended packages: the Dockerfile installs them (apt-get install without --no-install-recommends), hack/images does not")
	}
	for _, u := range d.Unsupported {
		out = append(out, fmt.Sprintf("unsupported: the Dockerfile's final stage does %q, which hack/images does not do", u))
	}
	if d.CGO != im.CGO {
		differ("cgo", d.CGO, im.CGO)
	}
	if d.Package != im.Package {
		differ("package built", d.Package, im.Package)
	}
	var want []string
	for _, f := range buildFlags {
		if f != "-buildvcs=false" { // a Docker build context has no .git
			want = append(want, f)
		}
	}
	if !slices.Equal(d.BuildFlags, want) {
		differ("go build flags", d.BuildFlags, want)
	}
	if d.Tags != im.Tags {
		differ("build tags", d.Tags, im.Tags)
	}
	if d.BinaryPath != im.BinaryPath {
		differ("binary path", d.BinaryPath, im.BinaryPath)
	}
	if d.User != im.User {
		differ("USER", d.User, im.User)
	}
	if !slices.Equal(d.Entrypoint, []string{im.BinaryPath}) {
		differ("ENTRYPOINT", d.Entrypoint, []string{im.BinaryPath})
	}
	if !slices.Equal(d.Env, im.Env) {
		differ("ENV", d.Env, im.Env)
	}
	if !slices.Equal(sorted(d.Volumes), sorted(im.Volumes)) {
		differ("VOLUME", d.Volumes, im.Volumes)
	}
	if !slices.Equal(sorted(d.Ports), sorted(im.Ports)) {
		differ("EXPOSE", d.Ports, im.Ports)
	}
	if d.WorkingDir != im.WorkingDir {
		differ("WORKDIR", d.WorkingDir, im.WorkingDir)
	}
	if d.BaseKind == staticBase {
		// distroless's nonroot user is 65532; the static base must have
		// the user the Dockerfile runs as.
		uid, _, _ := strings.Cut(d.User, ":")
		if !slices.ContainsFunc(im.Base.Users, func(u rootfs.User) bool { return fmt.Sprint(u.UID) == uid }) {
			out = append(out, fmt.Sprintf("USER %s: the static base has no such user", d.User))
		}
	}
	return out
}

func dockerfilePath(name string) string {
	return filepath.Join(deploytest.RepoRoot(), "deploy", "images", name)
}

// The no-Docker build makes the images the Dockerfiles describe: same
// base, packages, binary (package, cgo, flags, path), user, entrypoint and
// exposed paths.
func TestImagesAgreeWithDockerfiles(t *testing.T) {
	covered := map[string]bool{}
	for _, im := range images() {
		if im.Dockerfile == "" {
			continue
		}
		covered[im.Dockerfile] = true
		data, err := os.ReadFile(dockerfilePath(im.Dockerfile))
		if err != nil {
			t.Fatal(err)
		}
		d, err := readDockerfile(data)
		if err != nil {
			t.Fatalf("%s: %v", im.Dockerfile, err)
		}
		t.Logf("%s: %+v", im.Dockerfile, d)
		for _, problem := range disagreements(im, d) {
			t.Errorf("%s and hack/images disagree on %s", im.Dockerfile, problem)
		}
	}
	files, err := filepath.Glob(dockerfilePath("*.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no image in hack/images (nodemend.go)", f)
		}
	}
	if len(covered) != len(files) {
		t.Errorf("hack/images names %d Dockerfiles, deploy/images has %d", len(covered), len(files))
	}
}

// The agreement check notices each kind of change to a Dockerfile.
func TestDisagreementsNoticeDockerfileChanges(t *testing.T) {
	agent := images()[0]
	data, err := os.ReadFile(dockerfilePath(agent.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"package added", "tcpdump iptables", "tcpdump curl iptables", "packages"},
		{"package removed", " conntrack ", " ", "packages"},
		{"package replaced", "iptables nftables conntrack", "iptables ebtables conntrack", "packages"},
		{"user", "USER 0:0", "USER 65532:65532", "USER"},
		{"entrypoint", `ENTRYPOINT ["/usr/local/bin/nodemend-agent"]`, `ENTRYPOINT ["/usr/local/bin/nodemend-agent", "--host-root=/host"]`, "ENTRYPOINT"},
		{"binary path", "/out/nodemend-agent /usr/local/bin/nodemend-agent", "/out/nodemend-agent /usr/bin/nodemend-agent", "binary path"},
		{"volume", "USER 0:0", "VOLUME /var/lib/nodemend\nUSER 0:0", "VOLUME"},
		{"port", "USER 0:0", "EXPOSE 8088\nUSER 0:0", "EXPOSE"},
		{"release", "DEBIAN_RELEASE=bookworm", "DEBIAN_RELEASE=trixie", "base"},
		{"cgo", "CGO_ENABLED=1", "CGO_ENABLED=0", "cgo"},
		{"build tags", "-tags=grpcnotrace ", "", "build tags"},
		{"strip flags", `-ldflags="-s -w" `, "", "go build flags"},
		{"package in a second RUN", "USER 0:0", "RUN apt-get update && apt-get install -y --no-install-recommends curl\nUSER 0:0", "packages"},
		{"package after apt-get options", "&& rm -rf", "&& DEBIAN_FRONTEND=noninteractive apt-get -y --no-install-recommends install gdb && rm -rf", "packages"},
		{"package version pinned", " tcpdump ", " tcpdump=4.99.3-1 ", "packages"},
		{"recommended packages", "--no-install-recommends ", "", "recommended packages"},
		{"another command", "&& rm -rf", "&& curl -fsSL -o /usr/local/bin/tool https://example.invalid/tool && rm -rf", "unsupported"},
		{"file added", "USER 0:0", "COPY deploy/agent.yaml /etc/nodemend/agent.yaml\nUSER 0:0", "unsupported"},
		{"cmd", `ENTRYPOINT ["/usr/local/bin/nodemend-agent"]`, `ENTRYPOINT ["/usr/local/bin/nodemend-agent"]` + "\nCMD [\"--config=/etc/nodemend/agent.yaml\"]", "unsupported"},
		{"label", "USER 0:0", "LABEL org.opencontainers.image.source=https://example.invalid\nUSER 0:0", "unsupported"},
	} {
		changed := strings.Replace(string(data), c.from, c.to, 1)
		if changed == string(data) {
			t.Fatalf("%s: %q is not in %s", c.name, c.from, agent.Dockerfile)
		}
		d, err := readDockerfile([]byte(changed))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := disagreements(agent, d)
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, c.want+":") }) {
			t.Errorf("%s: disagreements %q, want one on %s", c.name, got, c.want)
		}
	}
}
