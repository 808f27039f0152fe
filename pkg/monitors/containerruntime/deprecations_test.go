package containerruntime

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/fakecri"
	"nodemend.dev/nodemend/pkg/health"
)

// Deprecation warnings as containerd 1.7/2.x reports them
// (pkg/deprecation: IDs and messages).
var (
	schema1 = fakecri.Deprecation{ID: "io.containerd.deprecation/pull-schema-1-image",
		Message: "Schema 1 images are deprecated since containerd v1.7, disabled in containerd v2.0, and will be removed in containerd v2.1. Since containerd v1.7.8, schema 1 images are identified by the \"io.containerd.image/converted-docker-schema1\" label."}
	mirrors = fakecri.Deprecation{ID: "io.containerd.deprecation/cri-registry-mirrors",
		Message: "The `mirrors` property of `[plugins.\"io.containerd.grpc.v1.cri\".registry]` is deprecated since containerd v1.5 and will be removed in containerd v2.1. Use `config_path` instead."}
)

// TestContainerdDeprecations talks to containerd's introspection API on a
// real gRPC socket (fakecri serves it beside CRI, as containerd does).
func TestContainerdDeprecations(t *testing.T) {
	root := hostRoot(t)
	clk := clocktesting.NewFakeClock(t0)
	m := newMonitor(t, root, clk, Options{})
	c := check(t, m, "containerd-deprecations")
	expect := func(want string) {
		t.Helper()
		fs, err := run(t, c)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range fs {
			if f.Reason != health.ReasonDeprecatedContainerdConfiguration {
				t.Fatalf("finding %+v", f)
			}
			got = append(got, f.Subject)
		}
		if strings.Join(got, ",") != want {
			t.Fatalf("findings %v, want %q", fs, want)
		}
	}

	expect("") // no runtime socket: nothing deprecated in use
	srv := startCRI(t, root, DefaultSocketPath)
	expect("")

	// A schema 1 image pulled ten minutes ago; the mirrors in the config
	// were read when containerd started, three hours ago.
	srv.SetDeprecations(fakecri.Deprecation{ID: schema1.ID, Message: schema1.Message, Last: t0.Add(-10 * time.Minute)},
		fakecri.Deprecation{ID: mirrors.ID, Message: mirrors.Message, Last: t0.Add(-3 * time.Hour)})
	expect("io.containerd.deprecation/pull-schema-1-image")
	fs, _ := run(t, c)
	if !strings.Contains(fs[0].Message, "containerd used a deprecated feature at "+t0.Add(-10*time.Minute).UTC().Format(time.RFC3339)+": Schema 1 images are deprecated") {
		t.Fatalf("message %q", fs[0].Message)
	}
	// An hour after its last use it is no longer reported.
	clk.SetTime(t0.Add(55 * time.Minute))
	expect("")

	// containerd restarted with the mirrors still in its config.
	srv.SetDeprecations(fakecri.Deprecation{ID: mirrors.ID, Message: mirrors.Message, Last: clk.Now().Add(-time.Minute)})
	expect("io.containerd.deprecation/cri-registry-mirrors")

	// CRI-O (or containerd before 1.7.7) has no such API: not checked.
	srv.Fail(codes.Unimplemented, fakecri.MethodIntrospectionServer)
	expect("")
	// A containerd that does not answer is an error, not a verdict.
	srv.Heal()
	srv.Hang(fakecri.MethodIntrospectionServer)
	if _, err := run(t, c); err == nil {
		t.Fatal("a hanging introspection call must fail the check")
	}
}
