package deploytest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/agent/config"
)

func dockerfile(t *testing.T, name string) []Instruction {
	t.Helper()
	return ParseDockerfile(Must[[]byte](t)(os.ReadFile(filepath.Join(RepoRoot(), "deploy", "images", name))))
}

func finalStage(ins []Instruction) []Instruction {
	last := ins[len(ins)-1].Stage
	var out []Instruction
	for _, i := range ins {
		if i.Stage == last {
			out = append(out, i)
		}
	}
	return out
}

func find(ins []Instruction, cmd string) []Instruction {
	var out []Instruction
	for _, i := range ins {
		if i.Cmd == cmd {
			out = append(out, i)
		}
	}
	return out
}

// goModVersion is the go directive of the main module ("1.26").
func goModVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(Must[[]byte](t)(os.ReadFile(filepath.Join(RepoRoot(), "go.mod"))))
	if m == nil {
		t.Fatal("no go directive in go.mod")
	}
	return string(m[1])
}

// Every binary has a multi-stage Dockerfile that builds it the way the
// Makefile does (cgo only for the agent), with the module's Go version,
// into a minimal final image that runs as non-root where it can.
func TestDockerfiles(t *testing.T) {
	for _, c := range []struct {
		file, binary, cgo, base, user string
	}{
		{"agent.Dockerfile", "nodemend-agent", "CGO_ENABLED=1", "debian:${DEBIAN_RELEASE}-slim", "0:0"},
		{"controller.Dockerfile", "nodemend-controller", "CGO_ENABLED=0", "gcr.io/distroless/static-debian12:nonroot", "65532:65532"},
		{"kubectl-mend.Dockerfile", "kubectl-mend", "CGO_ENABLED=0", "gcr.io/distroless/static-debian12:nonroot", "65532:65532"},
	} {
		ins := dockerfile(t, c.file)
		froms := find(ins, "FROM")
		if len(froms) < 2 {
			t.Errorf("%s: %d stages, want a build stage and a runtime stage", c.file, len(froms))
			continue
		}
		for _, a := range find(ins, "ARG") {
			if v, ok := strings.CutPrefix(a.Args, "GO_VERSION="); ok && !strings.HasPrefix(v, goModVersion(t)+".") {
				t.Errorf("%s: GO_VERSION %s, go.mod says go %s", c.file, v, goModVersion(t))
			}
		}
		build := ""
		for _, r := range find(ins, "RUN") {
			if strings.Contains(r.Args, "go build") {
				build = r.Args
			}
		}
		for _, want := range []string{c.cgo, "-trimpath", "./cmd/" + c.binary} {
			if !strings.Contains(build, want) {
				t.Errorf("%s: the go build step lacks %s: %q", c.file, want, build)
			}
		}
		final := finalStage(ins)
		if got := final[0].Args; got != c.base {
			t.Errorf("%s: final base %q, want %q", c.file, got, c.base)
		}
		users := find(final, "USER")
		if len(users) != 1 || users[0].Args != c.user {
			t.Errorf("%s: final USER %v, want %s", c.file, users, c.user)
		}
		entry := find(final, "ENTRYPOINT")
		if len(entry) != 1 || !strings.HasPrefix(entry[0].Args, `["/`) || !strings.Contains(entry[0].Args, c.binary+`"]`) {
			t.Errorf("%s: ENTRYPOINT %v, want the exec form of %s", c.file, entry, c.binary)
		}
		for _, i := range ins {
			if i.Cmd == "ADD" || strings.Contains(i.Args, ":latest") {
				t.Errorf("%s: %s %s (no ADD, no latest tags)", c.file, i.Cmd, i.Args)
			}
		}
	}
}

// toolPackages maps each command the agent runs to the Debian package that
// provides it.
var toolPackages = map[string]string{
	"journalctl": "systemd", "tcpdump": "tcpdump", "iptables-save": "iptables", "ip6tables-save": "iptables",
	"iptables-nft-save": "iptables", "ip6tables-nft-save": "iptables", "iptables-legacy-save": "iptables", "ip6tables-legacy-save": "iptables",
	"nft": "nftables", "conntrack": "conntrack", "ss": "iproute2", "df": "coreutils",
}

// hostOnlyTools are run by the agent when the host provides them: they
// must match the host's driver or filesystems (xfs_db runs in the host root,
// so that it knows the features of the host's XFS), so the image does not
// carry them.
var hostOnlyTools = []string{"nvidia-smi", "amd-smi", "neuron-ls", "xfs_db"}

// agentTools finds the commands the agent runs, from its source: the tool
// argument of the diagnostics collectors' commandCollector and runTool
// calls, the literal names given to LookPath and Run, and the journal
// reader's command.
func agentTools(t *testing.T) []string {
	t.Helper()
	tools := map[string]bool{config.Default().Sources.Journal.Command: true}
	fset := token.NewFileSet()
	for _, dir := range []string{"pkg/diagnostics/collectors", "pkg/diagnostics/pcap", "pkg/diagnostics", "pkg/monitors/storage", "pkg/monitors/networking"} {
		pkgs := Must[map[string]*ast.Package](t)(parser.ParseDir(fset, filepath.Join(RepoRoot(), dir), func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0))
		for _, p := range pkgs {
			ast.Inspect(p, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				arg := -1
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					if fn.Name == "commandCollector" || fn.Name == "runTool" {
						arg = 4
					}
				case *ast.SelectorExpr:
					switch fn.Sel.Name {
					case "LookPath":
						arg = 0
					case "Run":
						arg = 1
					}
				}
				if arg >= 0 && arg < len(call.Args) {
					if lit, ok := call.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						tools[Must[string](t)(strconv.Unquote(lit.Value))] = true
					}
				}
				return true
			})
		}
	}
	var out []string
	for tool := range tools {
		out = append(out, tool)
	}
	sort.Strings(out)
	return out
}

// The agent image installs exactly the packages of the tools the agent
// runs (plus CA certificates for uploads), and not the host-only ones.
func TestAgentImageCarriesOnlyItsTools(t *testing.T) {
	tools := agentTools(t)
	t.Logf("tools the agent runs: %v", tools)
	if len(tools) < 6 {
		t.Fatalf("found only %v in the agent's source", tools)
	}
	want := map[string]bool{"ca-certificates": true}
	for _, tool := range tools {
		if slices.Contains(hostOnlyTools, tool) {
			continue
		}
		pkg, ok := toolPackages[tool]
		if !ok {
			t.Errorf("the agent runs %s: add it to toolPackages (its Debian package) or hostOnlyTools", tool)
			continue
		}
		want[pkg] = true
	}
	delete(want, "coreutils") // in every Debian image
	got := map[string]bool{}
	for _, p := range AptInstalls(finalStage(dockerfile(t, "agent.Dockerfile"))) {
		got[p] = true
	}
	for p := range want {
		if !got[p] {
			t.Errorf("the agent image lacks %s", p)
		}
	}
	for p := range got {
		if !want[p] {
			t.Errorf("the agent image installs %s, which no tool of the agent needs", p)
		}
	}
}

// The agent is built with the same tags and strip flags everywhere it is
// built to ship: the Makefile's build (AGENT_TAGS, which make bench-agent
// passes too) and the Dockerfile (hack/images agrees with the Dockerfile,
// hack/images' agreement test). A tag left out of one would ship a
// different binary (grpcnotrace: 6 MB, docs/agent.md#footprint).
func TestAgentBuildFlagsAgree(t *testing.T) {
	makefile := string(Must[[]byte](t)(os.ReadFile(filepath.Join(RepoRoot(), "Makefile"))))
	m := regexp.MustCompile(`(?m)^AGENT_TAGS\s*:?=\s*(\S+)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no AGENT_TAGS")
	}
	tags := m[1]
	var makeBuild string
	for _, l := range strings.Split(makefile, "\n") {
		if strings.Contains(l, "go build") || strings.Contains(l, "$(GO) build") {
			if strings.Contains(l, "./cmd/nodemend-agent") && !strings.Contains(l, "grep") {
				makeBuild = l
			}
		}
	}
	for _, want := range []string{"-trimpath", `-tags "$(AGENT_TAGS)"`, `-ldflags="-s -w"`} {
		if !strings.Contains(makeBuild, want) {
			t.Errorf("the Makefile's agent build lacks %s: %q", want, makeBuild)
		}
	}
	var dockerBuild string
	for _, r := range find(dockerfile(t, "agent.Dockerfile"), "RUN") {
		if strings.Contains(r.Args, "go build") {
			dockerBuild = r.Args
		}
	}
	for _, want := range []string{"-trimpath", "-tags=" + tags + " ", `-ldflags="-s -w"`} {
		if !strings.Contains(dockerBuild, want) {
			t.Errorf("agent.Dockerfile's go build lacks %s (the Makefile's AGENT_TAGS is %s): %q", strings.TrimSpace(want), tags, dockerBuild)
		}
	}
	// make bench-agent measures the agent as make build builds it.
	if !regexp.MustCompile(`(?m)^bench-agent:.*\n\t.*go run ./sim/cmd/bench-agent -tags "\$\(AGENT_TAGS\)"`).MatchString(strings.ReplaceAll(makefile, "$(GO)", "go")) {
		t.Error(`the Makefile's bench-agent does not pass -tags "$(AGENT_TAGS)" to bench-agent`)
	}
	bench := string(Must[[]byte](t)(os.ReadFile(filepath.Join(RepoRoot(), "sim", "cmd", "bench-agent", "agent.go"))))
	for _, want := range []string{`"-trimpath"`, `"-ldflags=-s -w"`, `"CGO_ENABLED=1"`} {
		if !strings.Contains(bench, want) {
			t.Errorf("bench-agent's agent build lacks %s", want)
		}
	}
}
