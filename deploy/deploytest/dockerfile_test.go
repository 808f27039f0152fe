package deploytest

import (
	"reflect"
	"testing"
)

// RUN lines are read the way a shell splits them into commands, whatever
// the spelling of the apt invocation.
func TestShellCommandsAndApt(t *testing.T) {
	for _, c := range []struct {
		run      string
		commands [][]string
		installs []string
	}{
		{
			run: "apt-get update && apt-get install -y --no-install-recommends systemd tcpdump && rm -rf /var/lib/apt/lists/*",
			commands: [][]string{{"apt-get", "update"}, {"apt-get", "install", "-y", "--no-install-recommends", "systemd", "tcpdump"},
				{"rm", "-rf", "/var/lib/apt/lists/*"}},
			installs: []string{"systemd", "tcpdump"},
		},
		{
			run:      "--mount=type=cache,target=/var/cache/apt DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::=--force-confold install curl; apt install jq=1.6-2.1 | tee log",
			commands: [][]string{{"apt-get", "-y", "-o", "Dpkg::Options::=--force-confold", "install", "curl"}, {"apt", "install", "jq=1.6-2.1"}, {"tee", "log"}},
			installs: []string{"curl", "jq=1.6-2.1"},
		},
		{
			run:      `["apt-get", "install", "-t", "bookworm-backports", "nftables"]`,
			commands: [][]string{{"apt-get", "install", "-t", "bookworm-backports", "nftables"}},
			installs: []string{"nftables"},
		},
		{
			run:      "curl -fsSL https://example.invalid/get.sh | sh || true",
			commands: [][]string{{"curl", "-fsSL", "https://example.invalid/get.sh"}, {"sh"}, {"true"}},
		},
	} {
		got := ShellCommands(c.run)
		if !reflect.DeepEqual(got, c.commands) {
			t.Errorf("ShellCommands(%q) = %q, want %q", c.run, got, c.commands)
		}
		if pkgs := AptInstalls([]Instruction{{Cmd: "RUN", Args: c.run}}); !reflect.DeepEqual(pkgs, c.installs) {
			t.Errorf("AptInstalls(%q) = %q, want %q", c.run, pkgs, c.installs)
		}
	}
	a, ok := ReadApt([]string{"apt-get", "-o", "APT::Install-Recommends=false", "-y", "install", "tcpdump"})
	want := AptCommand{Subcommand: "install", Options: []string{"-o=APT::Install-Recommends=false", "-y"}, Args: []string{"tcpdump"}}
	if !ok || !reflect.DeepEqual(a, want) {
		t.Errorf("ReadApt = %+v, %v; want %+v", a, ok, want)
	}
	if _, ok := ReadApt([]string{"dpkg", "-i", "x.deb"}); ok {
		t.Error("dpkg read as apt")
	}
}
