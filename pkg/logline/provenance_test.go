package logline

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestProvenanceValidate(t *testing.T) {
	for _, ok := range []Provenance{ByKernel, BySystemd, ByRoot, ByAnyFile, ByUnit("kubelet.service"),
		ByUnit("init.scope"), ByUnit("getty@tty1.service"), ByUnit(`dev-disk-by\x2duuid-1.device`), ByFile("/var/log/syslog")} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []Provenance{"", "Kernel", "kmsg", "journal", "unit:", "unit:kubelet", "unit:.service", "unit:kubelet.",
		"unit:kube let.service", "unit:" + Provenance(strings.Repeat("a", 250)) + ".service", "unit:kubelet.service\n",
		"file:", "file:var/log/x", "file:/var/log/../x", "file:/", "files", "kernel ", "unit:kubelet.service,root"} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// A config file names provenances as strings, validated when decoded.
func TestProvenanceInConfig(t *testing.T) {
	var c struct {
		Accept []Provenance `json:"accept"`
	}
	if err := yaml.UnmarshalStrict([]byte("accept: [kernel, unit:kubelet.service, file:/var/log/app.log]"), &c); err != nil {
		t.Fatal(err)
	}
	if want := []Provenance{ByKernel, ByUnit("kubelet.service"), ByFile("/var/log/app.log")}; strings.Join(strs(c.Accept), " ") != strings.Join(strs(want), " ") {
		t.Fatalf("decoded %q, want %q", c.Accept, want)
	}
	if err := yaml.UnmarshalStrict([]byte("accept: [kubelet]"), &c); err == nil || !strings.Contains(err.Error(), "unknown provenance") {
		t.Fatalf("an unknown provenance decoded: %v", err)
	}
}

func strs(ps []Provenance) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// TestAccepts: each provenance believes its writer and nobody else, in
// particular not what a sender can claim (UNIT, SYSLOG_IDENTIFIER, which
// never reach Line.Unit for an ordinary process) nor a user-space kmsg
// record.
func TestAccepts(t *testing.T) {
	lines := map[string]Line{
		"kernel kmsg":           {Source: Kmsg, Origin: Origin{Kernel: true}},
		"user kmsg":             {Source: Kmsg, Origin: Origin{Facility: 1}},
		"kernel journal":        {Source: Journal, Origin: Origin{Kernel: true, Transport: "kernel"}},
		"user kmsg in journal":  {Source: Journal, Origin: Origin{Transport: "kernel", Facility: 1}},
		"kubelet":               {Source: Journal, Unit: "kubelet.service", Origin: Origin{Root: true}},
		"systemd about kubelet": {Source: Journal, Unit: "kubelet.service", Origin: Origin{Manager: true, Root: true}},
		"systemd itself":        {Source: Journal, Unit: "init.scope", Origin: Origin{Manager: true, Root: true}},
		"user session":          {Source: Journal, Unit: "session-3.scope", Origin: Origin{UID: "1000"}},
		"root session":          {Source: Journal, Unit: "session-4.scope", Origin: Origin{Root: true}},
		"pod, no unit":          {Source: Journal, Origin: Origin{UID: "65534"}},
		"file":                  {Source: File, Unit: "/var/log/app.log"},
		"zero":                  {},
	}
	for _, tc := range []struct {
		p    Provenance
		want []string
	}{
		{ByKernel, []string{"kernel kmsg", "kernel journal"}},
		{BySystemd, []string{"systemd about kubelet", "systemd itself"}},
		{ByRoot, []string{"kubelet", "systemd about kubelet", "systemd itself", "root session"}},
		{ByUnit("kubelet.service"), []string{"kubelet", "systemd about kubelet"}},
		{ByUnit("init.scope"), []string{"systemd itself"}},
		{ByAnyFile, []string{"file"}},
		{ByFile("/var/log/app.log"), []string{"file"}},
		{ByFile("/var/log/other.log"), nil},
	} {
		for name, l := range lines {
			want := false
			for _, w := range tc.want {
				want = want || w == name
			}
			if got := tc.p.Accepts(&l); got != want {
				t.Errorf("%s accepts %s: %v, want %v", tc.p, name, got, want)
			}
		}
	}
}
