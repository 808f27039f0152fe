package containerruntime

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

// registryThreshold is Env.Threshold with the registry defaults and overrides.
func registryThreshold(overrides map[string]float64) func(string) float64 {
	return func(reason string) float64 {
		if v, ok := overrides[reason]; ok {
			return v
		}
		r, ok := health.LookupReason(reason)
		if !ok || r.Threshold == nil {
			return 0
		}
		return r.Threshold.Default
	}
}

type ruleHarness struct {
	t       *testing.T
	m       *Monitor
	matcher *rules.Matcher
	clock   *clocktesting.FakeClock
}

func newRuleHarness(t *testing.T, overrides map[string]float64) *ruleHarness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := New(detection.Env{HostRoot: t.TempDir(), Clock: clk, Threshold: registryThreshold(overrides)}, Options{})
	t.Cleanup(func() { _ = m.Close() })
	matcher, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatalf("compile rules: %v", err)
	}
	return &ruleHarness{t: t, m: m, matcher: matcher, clock: clk}
}

// feed matches a journal line of a process of unit and interprets every
// match.
func (h *ruleHarness) feed(unit, text string) []detection.Finding {
	return h.feedLine(monitortest.Unit(unit, text, h.clock.Now().Add(-time.Second)))
}

// feedSystemd is feed for a line of systemd (PID 1) about unit.
func (h *ruleHarness) feedSystemd(unit, text string) []detection.Finding {
	return h.feedLine(monitortest.Systemd(unit, text, h.clock.Now().Add(-time.Second)))
}

func (h *ruleHarness) feedLine(line logline.Line) []detection.Finding {
	var out []detection.Finding
	h.matcher.Match(line, func(m logline.Match) { out = append(out, h.m.Interpret(m)...) })
	return out
}

func TestRulesOneShot(t *testing.T) {
	tests := []struct {
		name   string
		source logline.Source
		// daemon: the unit's own process wrote it; else systemd (PID 1)
		// about the unit.
		daemon bool
		unit   string
		text   string
		// want is the reason found, "" for none; msg and subject are checked when set.
		want    string
		msg     []string
		subject string
	}{
		// ContainerRuntimeFailed
		{name: "containerd killed", unit: "containerd.service",
			text: "containerd.service: Main process exited, code=killed, status=9/KILL",
			want: health.ReasonContainerRuntimeFailed, msg: []string{"containerd.service", "status=9/KILL"}, subject: "containerd.service"},
		{name: "containerd failed with result", unit: "containerd.service",
			text: "containerd.service: Failed with result 'signal'.",
			want: health.ReasonContainerRuntimeFailed, subject: "containerd.service"},
		{name: "crio exit code", unit: "crio.service",
			text: "crio.service: Main process exited, code=exited, status=1/FAILURE",
			want: health.ReasonContainerRuntimeFailed, subject: "crio.service"},
		{name: "docker failed with result", unit: "docker.service",
			text: "docker.service: Failed with result 'exit-code'.",
			want: health.ReasonContainerRuntimeFailed},
		{name: "containerd clean exit (debug journal)", unit: "containerd.service",
			text: "containerd.service: Main process exited, code=exited, status=0/SUCCESS"},
		{name: "containerd deactivated", unit: "containerd.service",
			text: "containerd.service: Deactivated successfully."},
		{name: "other unit failing is not the runtime", unit: "sshd.service",
			text: "sshd.service: Failed with result 'exit-code'."},
		{name: "runtime text from kmsg is ignored", source: logline.Kmsg,
			text: "containerd.service: Failed with result 'signal'."},

		// KubeletFailed
		{name: "kubelet exit code", unit: "kubelet.service",
			text: "kubelet.service: Main process exited, code=exited, status=1/FAILURE",
			want: health.ReasonKubeletFailed, msg: []string{"kubelet.service: Main process exited"}, subject: "kubelet.service"},
		{name: "kubelet failed with result", unit: "kubelet.service",
			text: "kubelet.service: Failed with result 'exit-code'.",
			want: health.ReasonKubeletFailed, subject: "kubelet.service"},
		{name: "kubelet's own error line is not a unit failure", unit: "kubelet.service", daemon: true,
			text: `E0612 08:15:42.123456    2140 run.go:72] "command failed" err="failed to run Kubelet: validate service connection: Failed with result"`},

		// ServiceFailedToStart
		{name: "failed to start, systemd >= 253", unit: "kubelet.service",
			text: "Failed to start kubelet.service - Kubernetes Kubelet.",
			want: health.ReasonServiceFailedToStart, msg: []string{"Failed to start kubelet.service - Kubernetes Kubelet."}, subject: "kubelet.service"},
		{name: "failed to start, older systemd", unit: "kubelet.service",
			text: "Failed to start Kubernetes Kubelet.",
			want: health.ReasonServiceFailedToStart, msg: []string{"kubelet.service: Failed to start Kubernetes Kubelet."}, subject: "kubelet.service"},
		{name: "failed to start containerd", unit: "containerd.service",
			text: "Failed to start containerd.service - containerd container runtime.",
			want: health.ReasonServiceFailedToStart, subject: "containerd.service"},
		{name: "kubelet klog line is not systemd's", unit: "kubelet.service", daemon: true,
			text: `E0612 08:15:42.123456    2140 kubelet.go:1566] "Failed to start ContainerManager" err="failed to initialize top level QOS containers"`},
		{name: "daemon's own failure text", unit: "myapp.service", daemon: true,
			text: "Failed to start server: listen tcp :8080: bind: address already in use"},
		{name: "started is fine", unit: "kubelet.service",
			text: "Started kubelet.service - Kubernetes Kubelet."},
		{name: "a daemon printing systemd's words is not systemd", unit: "kubelet.service", daemon: true,
			text: "Failed to start kubelet.service - Kubernetes Kubelet."},
	}
	var positives []logline.Line
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRuleHarness(t, nil)
			line := monitortest.Systemd(tt.unit, tt.text, t0)
			switch {
			case tt.source == logline.Kmsg:
				line = monitortest.Kernel(tt.text, t0)
			case tt.daemon:
				line = monitortest.Unit(tt.unit, tt.text, t0)
			}
			if tt.want != "" {
				positives = append(positives, line)
			}
			var fs []detection.Finding
			h.matcher.Match(line, func(m logline.Match) { fs = append(fs, h.m.Interpret(m)...) })
			if tt.want == "" {
				if len(fs) != 0 {
					t.Fatalf("want no finding, got %+v", fs)
				}
				return
			}
			if len(fs) != 1 || fs[0].Reason != tt.want {
				t.Fatalf("want one %s, got %+v", tt.want, fs)
			}
			f := fs[0]
			if !f.Observed.Equal(t0) {
				t.Errorf("Observed = %v, want the line time %v", f.Observed, t0)
			}
			if tt.subject != "" && f.Subject != tt.subject {
				t.Errorf("Subject = %q, want %q", f.Subject, tt.subject)
			}
			for _, want := range tt.msg {
				if !strings.Contains(f.Message, want) {
					t.Errorf("message %q lacks %q", f.Message, want)
				}
			}
		})
	}
	positives = append(positives, monitortest.Unit("kubelet.service", probeLine("Liveness", "default/web-0", "web"), t0),
		monitortest.Unit("kubelet.service", probeLine("Readiness", "default/web-0", "web"), t0))
	monitortest.NoForgeryMatches(t, newRuleHarness(t, nil).m.Rules(), positives)
}

func TestRepeatedRestart(t *testing.T) {
	h := newRuleHarness(t, nil)
	for n := 1; n <= 6; n++ {
		fs := h.feedSystemd("kubelet.service", fmt.Sprintf("kubelet.service: Scheduled restart job, restart counter is at %d.", n))
		if n < 5 {
			if len(fs) != 0 {
				t.Errorf("counter %d below threshold 5: got %+v", n, fs)
			}
			continue
		}
		if len(fs) != 1 || fs[0].Reason != health.ReasonRepeatedRestart || fs[0].Subject != "kubelet.service" ||
			!strings.Contains(fs[0].Message, fmt.Sprintf("restart counter is at %d (threshold 5)", n)) {
			t.Errorf("counter %d: got %+v", n, fs)
		}
	}

	// The unit is taken from the text when the line has none; the threshold
	// follows the config.
	h = newRuleHarness(t, map[string]float64{health.ReasonRepeatedRestart: 2})
	fs := h.feedSystemd("", "containerd.service: Scheduled restart job, restart counter is at 2.")
	if len(fs) != 1 || fs[0].Subject != "containerd.service" || !strings.Contains(fs[0].Message, "(threshold 2)") {
		t.Errorf("override: got %+v", fs)
	}
}

func probeLine(typ, pod, container string) string {
	return fmt.Sprintf(`I0612 08:15:42.123456    2140 prober.go:107] "Probe failed" probeType=%q pod=%q podUID="0b6c8e4e-3d55-4bd8-9f7a-1f2b3c4d5e6f" containerName=%q probeResult="failure" output="Get \"http://10.0.1.17:8080/healthz\": dial tcp 10.0.1.17:8080: connect: connection refused"`,
		typ, pod, container)
}

func TestProbeFailuresRateLimited(t *testing.T) {
	h := newRuleHarness(t, nil)
	count := func(reason string, fs []detection.Finding) int {
		n := 0
		for _, f := range fs {
			if f.Reason == reason {
				n++
			}
		}
		return n
	}

	// Nine liveness failures, 10 s apart: below the threshold of 10.
	for i := range 9 {
		if fs := h.feed("kubelet.service", probeLine("Liveness", "default/web-0", "web")); len(fs) != 0 {
			t.Fatalf("failure %d: %+v", i+1, fs)
		}
		h.clock.Step(10 * time.Second)
	}
	// Readiness failures are counted apart, startup probes not at all.
	for range 20 {
		h.feed("kubelet.service", probeLine("Startup", "default/web-0", "web"))
	}
	if fs := h.feed("kubelet.service", probeLine("Readiness", "default/web-1", "web")); len(fs) != 0 {
		t.Fatalf("one readiness failure: %+v", fs)
	}
	// The tenth liveness failure in the window fires once.
	fs := h.feed("kubelet.service", probeLine("Liveness", "default/web-0", "web"))
	if len(fs) != 1 || fs[0].Reason != health.ReasonLivenessProbeFailures || fs[0].Subject != "" {
		t.Fatalf("10th failure: %+v", fs)
	}
	for _, want := range []string{"10 liveness probe failures", "last 5m0s", "threshold 10", "pod default/web-0 container web"} {
		if !strings.Contains(fs[0].Message, want) {
			t.Errorf("message %q lacks %q", fs[0].Message, want)
		}
	}

	// More failures in the same window: rate-limited.
	got := 0
	for range 20 {
		h.clock.Step(10 * time.Second) // 200 s in all, still within 5 min of the finding
		got += count(health.ReasonLivenessProbeFailures, h.feed("kubelet.service", probeLine("Liveness", "default/web-0", "web")))
	}
	if got != 0 {
		t.Errorf("%d findings within the rate window, want 0", got)
	}
	// Five minutes after the finding, still failing: one more finding.
	h.clock.Step(100 * time.Second)
	if fs := h.feed("kubelet.service", probeLine("Liveness", "default/web-2", "app")); count(health.ReasonLivenessProbeFailures, fs) != 1 ||
		!strings.Contains(fs[0].Message, "pod default/web-2 container app") {
		t.Errorf("after the window: %+v", fs)
	}

	// Failures spread thinner than the threshold per window never fire.
	h = newRuleHarness(t, nil)
	for i := range 50 {
		if fs := h.feed("kubelet.service", probeLine("Readiness", "default/web-0", "web")); len(fs) != 0 {
			t.Fatalf("sparse failure %d fired: %+v", i, fs)
		}
		h.clock.Step(34 * time.Second) // at most 9 within any 5 min
	}

	// A kubelet line from another unit name, or without "Probe failed", is not counted.
	h = newRuleHarness(t, map[string]float64{health.ReasonLivenessProbeFailures: 1})
	if fs := h.feed("containerd.service", probeLine("Liveness", "default/web-0", "web")); len(fs) != 0 {
		t.Errorf("wrong unit: %+v", fs)
	}
	if fs := h.feed("kubelet.service", `I0612 08:15:42.123456    2140 prober.go:120] "Probe succeeded" probeType="Liveness" pod="default/web-0"`); len(fs) != 0 {
		t.Errorf("succeeded: %+v", fs)
	}
	if fs := h.feed("kubelet.service", probeLine("Liveness", "default/web-0", "web")); len(fs) != 1 {
		t.Errorf("threshold override 1: %+v", fs)
	}
}
