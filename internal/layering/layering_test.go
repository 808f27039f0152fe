package layering

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the layer table in docs/architecture.md")

const module = "nodemend.dev/nodemend"

// layer is a set of packages and the layers they may import. Packages are
// module-relative; "x/..." is x and every package under it. A package
// belongs to the layer with its longest matching pattern.
type layer struct {
	name string
	pkgs []string
	may  []string
	what string
}

// layers is the one rule of docs/architecture.md, bottom up: a package
// imports only its own layer and the layers in its may list.
var layers = []layer{
	{"contract", []string{"api/...", "pkg/health", "pkg/logline", "pkg/detection", "pkg/rungs"}, nil,
		"what the halves agree on: CRD types, condition types and the reason registry, log lines and rules, the monitor API, the table of remediation rungs"},
	{"plumbing", []string{"internal/apigate", "internal/backoff", "internal/bounded", "internal/bytecount", "internal/childproc", "internal/cloudmeta", "internal/command", "internal/coreclient", "internal/kubeconfig", "internal/mendclient", "internal/mountinfo", "internal/scheme", "internal/selfpages", "internal/textcut", "internal/workloop"}, []string{"contract"},
		"small production helpers: holding API requests through an outage, retry backoff, bounded reads, byte counts for people, child processes, host tools run for their output (one command runner), the cloud's instance metadata, the agent's core/v1 client, kubeconfig loading, the nodemend.dev API group's client, the mount table, the runtime scheme, paging out the agent's own binary, the informer and work queue loop of the objects the agent serves"},
	{"sources", []string{"pkg/source/...", "pkg/rules"}, []string{"contract", "plumbing"},
		"log readers (kmsg, journal, file tail) that produce log lines; the rule matcher"},
	{"monitors", []string{"pkg/monitors/..."}, []string{"sources", "contract", "plumbing"},
		"detection, one package per monitor (its rules, checks and config section), and the table of monitors"},
	{"diagnostics", []string{"pkg/diagnostics/..."}, []string{"sources", "contract", "plumbing"},
		"NodeDiagnostic bundles, redaction, upload, packet capture"},
	{"agent", []string{"pkg/agent/..."}, []string{"monitors", "sources", "diagnostics", "contract", "plumbing"},
		"nodemend-agent's wiring: config file, scheduler, exporter (conditions and events), metrics"},
	{"repair", []string{"pkg/repair/..."}, []string{"contract", "plumbing"},
		"repair decisions and steps: policy, unhealthy, gate, pool, record, drainpass, history (the typed record on events), backends, metrics"},
	{"controller", []string{"pkg/repair/controller"}, []string{"repair", "contract", "plumbing"},
		"nodemend-controller's reconciler: chains the decisions with the steps, records them, emits events"},
	{"cli", []string{"pkg/cli/..."}, []string{"repair", "diagnostics", "contract", "plumbing"},
		"kubectl mend: logs, status, timeline, explain"},
	{"binaries", []string{"cmd/..."}, []string{"agent", "controller", "cli", "repair", "monitors", "sources", "diagnostics", "contract", "plumbing"},
		"flags and main functions of the three shipped binaries"},
	{"testsupport", []string{"internal/testsupport/..."}, []string{"agent", "controller", "cli", "repair", "monitors", "sources", "diagnostics", "contract", "plumbing"},
		"fakes and harnesses for tests: real API server, fake host roots, namespaces, CRI, NVML"},
	{"simulation", []string{"sim/..."}, []string{"testsupport", "agent", "controller", "cli", "repair", "monitors", "sources", "diagnostics", "contract", "plumbing"},
		"the local simulation, a product of its own: the demo, e2e's cluster, the fleet benchmark"},
	{"real node", []string{"realnode/..."}, []string{"contract", "plumbing"},
		"one real node on this machine (kubelet, containerd, control plane) with the chart: hack/real-node.sh, make e2e-node"},
	{"tooling", []string{"hack/...", "deploy/...", "e2e/...", "internal/layering"}, []string{"real node", "simulation", "testsupport", "binaries", "agent", "controller", "cli", "repair", "monitors", "sources", "diagnostics", "contract", "plumbing"},
		"code generators, deployment checks, end-to-end tests, this test"},
}

// shipped are the binaries users install; their dependency lists must not
// contain test support.
var shipped = []string{"cmd/nodemend-agent", "cmd/nodemend-controller", "cmd/kubectl-mend"}

// neverShipped are packages (outside the module) that only tests should link.
var neverShipped = []string{
	"testing",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"sigs.k8s.io/controller-runtime/pkg/client/fake",
	"k8s.io/client-go/kubernetes/fake",
	"k8s.io/utils/clock/testing",
	"github.com/johannesboyne/gofakes3",
}

// cliOnly are modules only kubectl mend may link: the AWS SDK signs
// uploads with the user's credentials; the agent and the controller never
// hold those, and the agent's footprint is measured (docs/agent.md).
var cliOnly = []string{"github.com/aws/aws-sdk-go-v2", "github.com/aws/smithy-go"}

func layerOf(rel string) (layer, bool) {
	best, bestLen := layer{}, -1
	for _, l := range layers {
		for _, p := range l.pkgs {
			base, tree := strings.CutSuffix(p, "/...")
			if rel == base || (tree && strings.HasPrefix(rel, base+"/")) {
				if len(base) > bestLen {
					best, bestLen = l, len(base)
				}
			}
		}
	}
	return best, bestLen >= 0
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goList runs go list in the module root and decodes its JSON stream.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e"}, args...)...)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

// TestImportsPointDown: every package is in a layer, and imports only its
// own layer and those it may.
func TestImportsPointDown(t *testing.T) {
	pkgs := goList(t, "-json=ImportPath,Imports", "./...")
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The rule catches what it is for: an import pointing up, a package in no
// layer; and lets through imports within a layer, down, and outside the
// module.
func TestViolationsAreFound(t *testing.T) {
	got := violations([]pkg{
		{ImportPath: module + "/pkg/health", Imports: []string{module + "/pkg/repair/gate", module + "/pkg/logline", "fmt"}},
		{ImportPath: module + "/pkg/repair/gate", Imports: []string{module + "/pkg/repair/pool", module + "/pkg/health"}},
		{ImportPath: module + "/pkg/repair/controller", Imports: []string{module + "/pkg/agent/exporter"}},
		{ImportPath: module + "/newtop", Imports: nil},
	})
	want := []string{
		"pkg/health (contract) imports pkg/repair/gate (repair)",
		"pkg/repair/controller (controller) imports pkg/agent/exporter (agent)",
		"newtop is in no layer",
	}
	if len(got) != len(want) {
		t.Fatalf("violations = %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d = %q, want it to start %q", i, got[i], w)
		}
	}
}

// violations are the packages in no layer and the imports the table does
// not allow, one sentence each.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, _ := rel(p.ImportPath)
		fl, ok := layerOf(from)
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no layer: add it to the table in internal/layering and docs/architecture.md", from))
			continue
		}
		for _, imp := range p.Imports {
			to, inModule := rel(imp)
			if !inModule {
				continue
			}
			tl, ok := layerOf(to)
			if !ok || tl.name == fl.name || slices.Contains(fl.may, tl.name) {
				continue
			}
			out = append(out, fmt.Sprintf("%s (%s) imports %s (%s); %s may import only %v", from, fl.name, to, tl.name, fl.name, append([]string{fl.name}, fl.may...)))
		}
	}
	return out
}

// TestShippedBinariesLinkNoTestSupport: the binaries' dependency lists hold
// no test support, simulation or tooling package and no test library.
func TestShippedBinariesLinkNoTestSupport(t *testing.T) {
	for _, b := range shipped {
		deps := goList(t, "-deps", "-json=ImportPath", "./"+b)
		if len(deps) < 10 {
			t.Fatalf("%s: only %d dependencies listed", b, len(deps))
		}
		for _, d := range deps {
			if slices.Contains(neverShipped, d.ImportPath) {
				t.Errorf("%s links %s", b, d.ImportPath)
			}
			for _, m := range cliOnly {
				if b != "cmd/kubectl-mend" && (d.ImportPath == m || strings.HasPrefix(d.ImportPath, m+"/")) {
					t.Errorf("%s links %s, which only kubectl mend may", b, d.ImportPath)
				}
			}
			r, ok := rel(d.ImportPath)
			if !ok {
				continue
			}
			if l, _ := layerOf(r); l.name == "testsupport" || l.name == "simulation" || l.name == "tooling" {
				t.Errorf("%s links %s (%s)", b, r, l.name)
			}
		}
	}
}

// The layer table in docs/architecture.md is this one.
func TestArchitecturePageShowsTheLayers(t *testing.T) {
	const begin, end = "<!-- layers:begin (internal/layering) -->\n", "<!-- layers:end -->\n"
	path := filepath.Join(root(t), "docs", "architecture.md")
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(page), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the %q ... %q markers", path, begin, end)
	}
	want := before + begin + table() + end + after
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(page) {
		t.Errorf("the layer table in docs/architecture.md differs from internal/layering; run go test ./internal/layering -args -update")
	}
}

// table renders the layers top down, as the page shows them.
func table() string {
	var b strings.Builder
	b.WriteString("| layer | packages | may import | what |\n|---|---|---|---|\n")
	for _, l := range slices.Backward(layers) {
		may := "—"
		if len(l.may) > 0 {
			may = strings.Join(l.may, ", ")
		}
		fmt.Fprintf(&b, "| **%s** | `%s` | %s | %s |\n", l.name, strings.Join(l.pkgs, "` `"), may, l.what)
	}
	return b.String()
}
