package migration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli"
)

const root = "../../.."

// docs/engines.md's EKS section is what the registries, the command tree
// and the API types say now.
func TestSectionIsCurrent(t *testing.T) {
	want, err := Render(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, DocPath))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (%v); run `go run ./hack/genmigration`", DocPath, err)
	}
}

// A renamed flag or API field fails the generation.
func TestChecksCatchRenames(t *testing.T) {
	tree := cli.NewRootCommand(cli.Streams{})
	if err := checkCommand(tree, command{command: []string{"logs"}, flags: []string{"no-such-flag"}}); err == nil {
		t.Error("an unknown flag passed")
	}
	if err := checkCommand(tree, command{command: []string{"no-such-command"}}); err == nil {
		t.Error("an unknown command passed")
	}
	if err := checkField(field{nodemend: "`spec.packetCapture.uploadURL`", kind: v1alpha1.NodeDiagnostic{}}); err == nil {
		t.Error("an unknown field passed")
	}
	if err := checkField(field{nodemend: "`spec.rules[].toleration` and `spec.maxUnhealthy`", kind: v1alpha1.NodeRepairPolicy{}}); err != nil {
		t.Error(err)
	}
}

// The reason table joins by name, family and explicit mapping, and calls
// a reason nodemend lacks "not detected".
func TestReasonRows(t *testing.T) {
	section, err := renderReasons(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `ForkFailedOutOfPIDs` | KernelReady | Fatal | same | Fatal |",
		"| `NvidiaXID&lt;N&gt;Error` | AcceleratedHardwareReady | Fatal | family `NvidiaXIDError`",
		"| `&lt;service&gt;RepeatedRestart` | ContainerRuntimeReady | Warning | `RepeatedRestart`",
		"| `RapidCron` | KernelReady | Warning | same | Warning |",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("no row %q in\n%s", want, section)
		}
	}
}
