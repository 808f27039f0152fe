package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/monitors/storage"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/agent/config"
)

func systemdFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// unitSettings parses a unit file into section.key → values (a key may
// repeat), joining continuation lines.
func unitSettings(text string) map[string][]string {
	out := map[string][]string{}
	section := ""
	var pending string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		if strings.HasSuffix(line, "\\") {
			pending = strings.TrimSuffix(line, "\\")
			continue
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			out[section+"."+k] = append(out[section+"."+k], strings.TrimSpace(v))
		}
	}
	return out
}

// The unit runs the agent with flags it has, the kubelet's credentials,
// writable state and bundle directories where the config and diagnostics
// write, and none of the hardening options that would blind a monitor.
func TestSystemdUnit(t *testing.T) {
	u := unitSettings(systemdFile(t, "nodemend-agent.service"))
	exec := u["Service.ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("ExecStart = %v", exec)
	}
	env := map[string]string{}
	for _, e := range u["Service.Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	fields := strings.Fields(exec[0])
	if fields[0] != "/usr/local/bin/nodemend-agent" {
		t.Errorf("ExecStart runs %s", fields[0])
	}
	args := make([]string, 0, len(fields)-1)
	for _, a := range fields[1:] {
		args = append(args, os.Expand(a, func(k string) string { return env[k] }))
	}
	fl := newCommand().Flags()
	if err := fl.Parse(args); err != nil {
		t.Fatalf("ExecStart args %v: %v", args, err)
	}
	if got := fl.Lookup("kubeconfig").Value.String(); got != "/var/lib/kubelet/kubeconfig" {
		t.Errorf("--kubeconfig=%s, want the kubelet's", got)
	}
	if got := fl.Lookup("config").Value.String(); got != "/etc/nodemend/agent.yaml" {
		t.Errorf("--config=%s", got)
	}
	if got := fl.Lookup("host-root").Value.String(); got != "/" {
		t.Errorf("--host-root=%s on the host", got)
	}
	if got := fl.Lookup("node-name").Value.String(); got != "%H" {
		t.Errorf("--node-name=%s, want the host name (%%H) unless agent.env says otherwise", got)
	}

	// Writable under ProtectSystem=strict: the storage probe's directory and
	// the diagnostics bundles.
	if u["Service.ProtectSystem"][0] != "strict" {
		t.Errorf("ProtectSystem=%v", u["Service.ProtectSystem"])
	}
	probe := config.Default().Monitors.Section("storage").(storage.Config).ProbeDir
	if !strings.HasPrefix(probe, "/var/lib/"+u["Service.StateDirectory"][0]+"/") {
		t.Errorf("StateDirectory=%v does not hold the probe directory %s", u["Service.StateDirectory"], probe)
	}
	if u["Service.LogsDirectory"][0] != "nodemend" {
		t.Errorf("LogsDirectory=%v, want nodemend (/var/log/nodemend: bundles)", u["Service.LogsDirectory"])
	}
	for key, bad := range map[string]string{
		"Service.ProtectKernelLogs": "yes", "Service.ProtectClock": "yes", "Service.PrivateDevices": "yes",
		"Service.PrivateNetwork": "yes", "Service.MemoryDenyWriteExecute": "yes",
	} {
		for _, v := range u[key] {
			if v == bad {
				t.Errorf("%s=%s would blind a monitor (see the unit's comments)", key, v)
			}
		}
	}
	caps := strings.Fields(strings.Join(u["Service.CapabilityBoundingSet"], " "))
	for _, c := range []string{"CAP_SYSLOG", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYS_ADMIN", "CAP_NET_RAW"} {
		if !strings.Contains(strings.Join(caps, " "), c) {
			t.Errorf("CapabilityBoundingSet lacks %s", c)
		}
	}
	for _, want := range []string{"Service.NoNewPrivileges", "Service.ProtectHome", "Service.PrivateTmp", "Service.RestrictAddressFamilies",
		"Service.ProtectKernelTunables", "Service.ProtectControlGroups", "Service.MemoryMax", "Service.Restart"} {
		if len(u[want]) == 0 {
			t.Errorf("no %s", want)
		}
	}
	if strings.Contains(strings.Join(u["Unit.Requires"], " "), "containerd") || strings.Contains(strings.Join(u["Unit.After"], " "), "containerd") {
		t.Error("the agent must not depend on the container runtime it reports on")
	}
}

// systemd itself accepts the unit (systemd-analyze verify, with the binary
// path pointed at an existing executable).
func TestSystemdUnitVerifies(t *testing.T) {
	unit := strings.ReplaceAll(systemdFile(t, "nodemend-agent.service"), "/usr/local/bin/nodemend-agent", "/bin/true")
	path := filepath.Join(t.TempDir(), "nodemend-agent.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The example config parses, and is the defaults.
func TestSystemdExampleConfig(t *testing.T) {
	if _, err := config.Parse([]byte(systemdFile(t, "agent.yaml"))); err != nil {
		t.Error(err)
	}
	for _, line := range strings.Split(systemdFile(t, "agent.env"), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			t.Errorf("agent.env sets %q; the example leaves every default in the unit", line)
		}
	}
}
