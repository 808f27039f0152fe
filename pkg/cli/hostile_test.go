package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// hostile is text an attacker who can write an API string puts in it:
// clear the screen, set the window title, return to the line start and
// overwrite it, a C1 CSI, a bidi override that reverses what follows.
const hostile = "fork failed\x1b[2J\x1b]0;pwned\x07\r\u009b31mOK\u202edetaler\u2066"

// terminalActive finds what a terminal would act on in out: ESC, CR, other
// C0 controls but the layout ones, C1 controls (as runes or raw bytes),
// bidi controls and line separators.
func terminalActive(out string) []string {
	var found []string
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			found = append(found, fmt.Sprintf("byte %#x at %d", out[i], i))
		case r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f):
			found = append(found, fmt.Sprintf("%U at %d", r, i))
		case r >= 0x80 && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e,
			r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			found = append(found, fmt.Sprintf("%U at %d", r, i))
		}
		i += size
	}
	return found
}

// ourColours are the only escape sequences kubectl mend writes itself.
var ourColours = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// Every command shows strings from the API (conditions, annotations,
// events, the pause switch's reason, a capture's message) with their
// terminal controls escaped, in tables, in -o wide, and in -o json and
// -o yaml (where JSON still decodes to the exact value); with colour on,
// the only escapes left are kubectl mend's own colours.
func TestHostileAPIStringsAreShownEscaped(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	ctl := namespace(t, "hostile-ctl")
	pause := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ctl, Name: "nodemend-pause"}, Data: map[string]string{"reason": hostile}}
	if _, err := core.CoreV1().ConfigMaps(ctl).Create(ctx, pause, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.CoreV1().ConfigMaps(ctl).Delete(context.Background(), pause.Name, metav1.DeleteOptions{})
	})
	node := "hostile-node"
	createNode(t, testNode{name: node, labels: map[string]string{"hostile": "yes"},
		annotations: map[string]string{
			record.StateAnnotation: v1alpha1.RepairRecord{Phase: v1alpha1.RepairPhaseDraining, Started: metav1.NewTime(now.Add(-2 * time.Minute)),
				Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: hostile}}.Encode(),
			record.VetoAnnotation: hostile,
		},
		taints: []corev1.Taint{record.Taint("KernelReady")},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionFalse, now.Add(-time.Hour)),
			condition("KernelReady", corev1.ConditionFalse, "Kernel\x1b[8mHidden", hostile, now.Add(-time.Hour))}})
	agentEvent(t, node, "ForkFailedOutOfPIDs", hostile, now.Add(-time.Minute))
	controllerEvent(t, "Node", node, "NodeRepairStarted", "Taint", hostile, now.Add(-2*time.Minute))
	ns := namespace(t, "hostile-pods")
	pod := pausePod(ns, "hostile-pod")
	pod.Spec.NodeName = node
	if _, err := core.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	coreEvent(t, ns, "Pod", "hostile-pod", "kubelet", corev1.EventTypeWarning, "FailedCreatePodSandBox", hostile)

	kc := kubeconfig(t, cfg)
	status := []string{"--kubeconfig", kc, "status", "-l", "hostile=yes", "--controller-namespace", ctl}
	commands := [][]string{
		status,
		append(status, "-o", "wide"),
		{"--kubeconfig", kc, "timeline", node},
		{"--kubeconfig", kc, "explain", "node/" + node, "--controller-namespace", ctl},
		{"--kubeconfig", kc, "explain", "pod/hostile-pod", "-n", ns},
	}
	for _, args := range commands {
		out, err := run(t, append(args, "--color", "never")...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if bad := terminalActive(out); len(bad) > 0 {
			t.Errorf("kubectl mend %s printed terminal controls: %v", strings.Join(args[2:], " "), bad)
		}
		if !strings.Contains(out, `\x1b[2J`) {
			t.Errorf("kubectl mend %s: the hostile text is not shown escaped", strings.Join(args[2:], " "))
		}
		coloured, err := run(t, append(args, "--color", "always")...)
		if err != nil {
			t.Fatal(err)
		}
		if bad := terminalActive(ourColours.ReplaceAllString(coloured, "")); len(bad) > 0 {
			t.Errorf("kubectl mend %s --color always printed terminal controls besides its colours: %v", strings.Join(args[2:], " "), bad)
		}
	}

	// Structured output: nothing active, and JSON decodes to the exact
	// (stored) value.
	for _, format := range []string{"json", "yaml"} {
		out, err := run(t, append(status, "-o", format)...)
		if err != nil {
			t.Fatal(err)
		}
		if bad := terminalActive(out); len(bad) > 0 {
			t.Errorf("status -o %s printed terminal controls: %v", format, bad)
		}
		var doc struct {
			PauseReason string `json:"pauseReason"`
		}
		data := []byte(out)
		if format == "yaml" {
			if data, err = yaml.YAMLToJSON(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		if format == "json" && doc.PauseReason != hostile {
			t.Errorf("-o json does not decode to the stored value: %q", doc.PauseReason)
		}
		if format == "yaml" && !strings.Contains(doc.PauseReason, "fork failed") {
			t.Errorf("-o yaml lost the value: %q", doc.PauseReason)
		}
	}
}

// kubectl mend logs, against an agent whose status is hostile: its
// failure message is shown escaped, in the progress lines and in the
// error as main prints it.
func TestLogsShowsAHostileFailureEscaped(t *testing.T) {
	ctx := context.Background()
	node := "hostile-logs"
	createNode(t, testNode{name: node})
	stop := fakeAgent(t, node, func(st *v1alpha1.NodeDiagnosticStatus, gen int64) {
		st.LogCapture = &v1alpha1.CaptureStatus{State: v1alpha1.CaptureFailed, Generation: gen, Message: hostile}
	})
	defer stop()
	var out bytes.Buffer
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	root.SetArgs([]string{"--kubeconfig", kubeconfig(t, cfg), "logs", node, "-o", t.TempDir(), "--timeout", "30s"})
	err := root.ExecuteContext(ctx)
	if err == nil {
		t.Fatal("a failed capture reported success")
	}
	PrintError(&out, err)
	t.Logf("%s", out.String())
	if bad := terminalActive(out.String()); len(bad) > 0 {
		t.Errorf("logs printed terminal controls: %v", bad)
	}
	if !strings.Contains(out.String(), `\x1b[2J`) {
		t.Error("the failure message is not shown")
	}
}

// A status that names a file outside the output directory (an older CRD
// without the fileName rule, or a hostile status writer) is not
// downloaded, and nothing is written outside -o DIR.
func TestBundlePathStaysInTheOutputDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ node, file string }{
		{"n1", "../../../etc/cron.d/evil"},
		{"n1", "/etc/passwd"},
		{"n1", ".."},
		{"n1", "a/../../b.tar.gz"},
		{"n1", `..\..\evil`},
		{"n1", ""},
		{"n1", ".bashrc"},
		{"n1", "bundle.tar.gz\x00.txt"},
		{"../n1", "bundle.tar.gz"},
		{"..", "bundle.tar.gz"},
		{"n1/../..", "bundle.tar.gz"},
		{"", "bundle.tar.gz"},
	} {
		if p, err := bundlePath(dir, tc.node, tc.file); err == nil {
			t.Errorf("bundlePath(%q, %q) = %q, want a refusal", tc.node, tc.file, p)
		}
	}
	p, err := bundlePath(dir, "ip-10-0-1-23.ec2.internal", "nodediagnostic-x-20260101T000000Z.tar.gz")
	if err != nil || p != filepath.Join(dir, "ip-10-0-1-23.ec2.internal", "nodediagnostic-x-20260101T000000Z.tar.gz") {
		t.Fatalf("a real bundle: %q %v", p, err)
	}

	// Through the command: the download is refused before any request,
	// and the output directory stays empty.
	o := &logsOptions{outputDir: dir}
	c := &Clients{Core: core}
	_, err = o.download(context.Background(), c, NewProgress(&bytes.Buffer{}, []string{"n1"}), "n1",
		&v1alpha1.CaptureStatus{State: v1alpha1.CaptureCompleted, FileName: "../../../tmp/evil", SizeBytes: 1})
	if err == nil || !strings.Contains(err.Error(), "not a plain file name") {
		t.Fatalf("download of a hostile file name: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the output directory got %d entries", len(entries))
	}
}

// fakeAgent accepts the NodeDiagnostics of node and writes the status set
// makes, as a (hostile) agent would; stop ends it.
func fakeAgent(t *testing.T, node string, set func(*v1alpha1.NodeDiagnosticStatus, int64)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list, err := nd.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(mendclient.NodeNameField, node).String()})
			if err == nil {
				for i := range list.Items {
					obj := &list.Items[i]
					if meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionAccepted) {
						continue
					}
					set(&obj.Status, obj.Generation)
					meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue,
						Reason: "AgentAccepted", Message: hostile})
					if _, err := nd.UpdateStatus(ctx, obj); err != nil && !errors.Is(err, context.Canceled) {
						t.Logf("fake agent: %v", err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// kubectl mend logs -o DIR with DIR/NODE planted as a link to a directory
// of the user's (another user of a shared DIR can do that): the command
// fails saying why, and nothing is written through the link; with --flat,
// the same for a link planted as DIR/NODE-logs.tar.gz.
func TestLogsNeverWritesThroughALinkInTheOutputDirectory(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	startAgent(t, node, h, nil)
	base := t.TempDir()
	dir, victim := filepath.Join(base, "out"), filepath.Join(base, "ssh")
	for _, d := range []string{dir, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, filepath.Join(dir, node)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(victim, "authorized_keys"), filepath.Join(dir, node+"-logs.tar.gz")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"logs", node, "-o", dir}, {"logs", node, "-o", dir, "--flat"}} {
		out, err := run(t, append([]string{"--kubeconfig", kubeconfig(t, cfg)}, args...)...)
		if err == nil || !strings.Contains(out, "symbolic link") {
			t.Errorf("%v: err %v, want a refusal naming the link", args, err)
		}
		if entries, _ := os.ReadDir(victim); len(entries) != 0 {
			t.Fatalf("%v: wrote %d files through the link", args, len(entries))
		}
	}
}
