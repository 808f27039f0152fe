package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The agent links only the API kinds it uses (docs/agent.md#footprint): no
// typed clientset or its scheme (every API group), no dynamic client (its
// apply machinery and unstructured round trips), no apply configurations, no OpenAPI models (strategic merge patches), and of
// k8s.io/api only core/v1.
func TestAgentLinksOnlyTheKindsItUses(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list listed only %d dependencies", len(deps))
	}
	forbidden := []string{
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/applyconfigurations/",
		"k8s.io/client-go/informers",
		"k8s.io/client-go/dynamic",
		"k8s.io/client-go/util/apply",
		"k8s.io/client-go/tools/record",
		"k8s.io/apimachinery/pkg/util/strategicpatch",
		"k8s.io/kube-openapi/pkg/util/proto",
		"k8s.io/kube-openapi/pkg/validation",
		"github.com/google/gnostic-models/",
		"sigs.k8s.io/controller-runtime",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == strings.TrimSuffix(f, "/") || strings.HasPrefix(d, f) || strings.HasPrefix(d, f+"/") {
				t.Errorf("nodemend-agent links %s", d)
			}
		}
		if strings.HasPrefix(d, "k8s.io/api/") && d != "k8s.io/api/core/v1" {
			t.Errorf("nodemend-agent links the API group %s; it uses core/v1 only", d)
		}
	}
}

// No nodemend package builds large tables when the program starts: what an
// init allocates stays resident on every node, used or not (the DCGM
// matchers, 600 KB, are compiled on the first dcgmi message). The runtime's
// init trace counts each package's allocations; tables a check needs are
// built on first use (sync.OnceValue).
func TestNoPackageInitBuildsLargeTables(t *testing.T) {
	const maxInitBytes = 64 << 10
	bin := filepath.Join(t.TempDir(), "nodemend-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--help")
	cmd.Env = append(cmd.Environ(), "GODEBUG=inittrace=1")
	out, _ := cmd.CombinedOutput() // --help exits non-zero; the trace is printed before main
	traced := 0
	for _, line := range strings.Split(string(out), "\n") {
		// init nodemend.dev/nodemend/pkg/x @44 ms, 2.5 ms clock, 610184 bytes, 3357 allocs
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		traced++
		bytes, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("init trace line %q: %v", line, err)
		}
		if strings.HasPrefix(f[1], "nodemend.dev/") && bytes > maxInitBytes {
			t.Errorf("init of %s allocates %d bytes (> %d); build its tables on first use", f[1], bytes, maxInitBytes)
		}
	}
	if traced < 50 {
		t.Fatalf("the init trace named only %d packages:\n%s", traced, out)
	}
}
