package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

// uptimeUsec is the host's uptime in WithProc's proc/uptime (350735.47 s):
// kernel records near it are recent, as a replay judges them.
const uptimeUsec = 350735_470_000

// customRules is an operator's config: an in-house driver's kernel line
// (Fatal), a storage appliance's daemon (Warning), a site file (Fatal).
const customRulesConfig = `
customRules:
  - reason: CustomAcmeNICLinkReset
    condition: KernelReady
    severity: Fatal
    description: The ACME NIC did not come back from a reset.
    source: kmsg
    accept: [kernel]
    contains: ["link reset timeout"]
    pattern: 'acmenic (?P<dev>\S+): link reset timeout after (?P<ms>\d+) ms'
    message: "ACME NIC ${dev} did not come back from a reset in ${ms} ms"
  - reason: CustomVaultPathError
    condition: KernelReady
    severity: Warning
    source: journal
    unit: vault-agent.service
    accept: [unit:vault-agent.service]
    contains: ["path error on"]
    pattern: 'path error on (?P<path>\S+)'
    message: "vault appliance path ${path} failed"
  - reason: CustomSiteDiskFailed
    condition: KernelReady
    severity: Fatal
    source: file
    file: /var/log/site/disks.log
    accept: [file:/var/log/site/disks.log]
    contains: ["site-disk FAILED"]
`

// events lists the node's events of one reason.
func (r *running) eventsOf(reason string) []corev1.Event {
	r.t.Helper()
	evs, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", r.node), fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return evs.Items
}

// An operator's rules on a running agent: each source's line becomes its
// reason on the Node or as an Event, forged lines of the same words do
// not, a file others can write is not read, and a bad rule in a reload is
// refused naming the rule and field while the last good rules stay.
func TestCustomRulesOnARunningAgent(t *testing.T) {
	root := hostroot.New(t).WithProc()
	root.WriteFile("var/log/site/disks.log", "")
	root.WriteFile("var/log/site/open.log", "")
	if err := os.Chmod(root.Path("var/log/site/open.log"), 0o666); err != nil {
		t.Fatal(err)
	}
	r := startAgent(t, root, fileJournal+customRulesConfig)
	r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))

	// Forgeries first: a user-space write to /dev/kmsg (facility 1) and a
	// process claiming the unit by SYSLOG_IDENTIFIER.
	root.AppendKmsg(hostroot.KmsgRecord(12, 1, uptimeUsec, "acmenic eth9: link reset timeout after 5000 ms"))
	root.AppendJournal(map[string]string{"MESSAGE": "path error on /forged", "SYSLOG_IDENTIFIER": "vault-agent", "_UID": "1000",
		"__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().UnixMicro())})
	// The real ones.
	root.AppendJournal(map[string]string{"MESSAGE": "path error on /vol/a7", "_SYSTEMD_UNIT": "vault-agent.service", "_UID": "0",
		"_PID": "4321", "__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().UnixMicro())})
	ev := r.waitEvent("CustomVaultPathError")
	if ev.Message != "vault appliance path /vol/a7 failed" || ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %s %q", ev.Type, ev.Message)
	}
	root.AppendKmsg(hostroot.KmsgRecord(3, 2, uptimeUsec+1, "acmenic eth1: link reset timeout after 5000 ms"))
	n := r.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, "CustomAcmeNICLinkReset"))
	if c := condition(n, health.KernelReady); c.Message != "ACME NIC eth1 did not come back from a reset in 5000 ms" {
		t.Errorf("condition message %q", c.Message)
	}
	if evs := r.eventsOf("CustomVaultPathError"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("the forged journal line counted: %+v", evs)
	}

	// A file rule reads its root-owned file.
	f, err := os.OpenFile(root.Path("var/log/site/disks.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// The follower may open the file after a first line: repeat it.
		_, _ = f.WriteString("site-disk FAILED: /dev/sdq\n")
		n := r.waitNode("", func(*corev1.Node) bool { return true })
		if c := condition(n, health.KernelReady); c != nil && strings.Contains(c.Message, "more active: CustomSiteDiskFailed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file rule did not report: %+v", condition(n, health.KernelReady))
		}
	}
	f.Close()

	// A rule on a file others can write: not read, and said so on the Node.
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+customRulesConfig+strings.ReplaceAll(`
  - reason: CustomOpenFile
    condition: KernelReady
    severity: Fatal
    source: file
    file: /var/log/site/open.log
    accept: [file]
    contains: ["FAILED"]
`, "\n", "\n"))
	ev = r.waitEvent(ReasonUntrustedLogFile)
	if !strings.Contains(ev.Message, "/var/log/site/open.log") || !strings.Contains(ev.Message, "writable by group or others") {
		t.Errorf("untrusted file event %q", ev.Message)
	}

	// A bad rule: the whole new config is refused, naming rule and field.
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+strings.Replace(customRulesConfig, `pattern: 'path error on (?P<path>\S+)'`, `pattern: '((a{100}){100}){100}'`, 1))
	ev = r.waitEvent("InvalidAgentConfig")
	if !strings.Contains(ev.Message, "customRules[1] (CustomVaultPathError).pattern") || !strings.Contains(ev.Message, "keeps its last good config") {
		t.Errorf("refusal %q", ev.Message)
	}
	// The last good rules are still in force.
	root.AppendJournal(map[string]string{"MESSAGE": "path error on /vol/b2", "_SYSTEMD_UNIT": "vault-agent.service", "_UID": "0",
		"_PID": "4321", "__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().UnixMicro())})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if evs := r.eventsOf("CustomVaultPathError"); len(evs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last good rules stopped after a refused reload: %+v", r.eventsOf("CustomVaultPathError"))
		}
	}
}

// A site check script, run for real: its exit 1 turns the condition
// False with its first line (redacted), exit 0 recovers it.
func TestCustomCheckOnARunningAgent(t *testing.T) {
	dir, err := os.MkdirTemp("/var/lib", "nodemend-agent-check-")
	if err != nil {
		t.Fatalf("a directory only root can write: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	if err := os.WriteFile(state, []byte("bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := filepath.Join(dir, "check-nfs")
	if err := os.WriteFile(check, []byte("#!/bin/sh\nif grep -q bad "+state+"; then echo \"NFS /mnt/data stale, token=ghp_0123456789abcdefghijABCDEFGHIJ012345\"; exit 1; fi\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := hostroot.New(t).WithProc()
	cfg := fileJournal + fmt.Sprintf(`
customChecks:
  - reason: CustomSiteNFSMounted
    condition: KernelReady
    severity: Fatal
    command: [%s]
    period: 10s
    timeout: 5s
`, check)
	// The programs run unchrooted here: the script and its /bin/sh are
	// this machine's (the agent's host tools would be chrooted into the
	// host root).
	r := startAgentWith(t, root, cfg, corev1.NodeSpec{}, func(o *Options) { o.HostCommands = command.Exec{} })
	n := r.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, "CustomSiteNFSMounted"))
	if c := condition(n, health.KernelReady); !strings.HasPrefix(c.Message, "NFS /mnt/data stale, token=") || strings.Contains(c.Message, "ghp_0123456789") {
		t.Errorf("condition message %q", c.Message)
	}
	if err := os.WriteFile(state, []byte("good\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := r.waitNode("", func(*corev1.Node) bool { return true })
		if c := condition(n, health.KernelReady); c.Status == corev1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check passed and the condition stayed %+v", condition(n, health.KernelReady))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A Warning that repeats becomes Fatal, and the count survives a restart
// of the agent: the kernel's records are replayed as far back as the
// promotion's window (past the configured 10-minute lookback), the
// journal's entries read again (no new Events for them).
func TestPromotionByRepetitionSurvivesARestart(t *testing.T) {
	const promoted = `
reasons:
  SoftLockup:
    promote: {count: 3, within: 30m, reason: CustomRepeatedSoftLockups}
customRules:
  - reason: CustomVaultPathError
    condition: KernelReady
    severity: Warning
    source: journal
    unit: vault-agent.service
    accept: [unit:vault-agent.service]
    contains: ["path error on"]
    promote: {count: 3, within: 30m, reason: CustomVaultPathFailing}
`
	lockup := func(seq int, minutesAgo float64) string {
		return hostroot.KmsgRecord(4, uint64(seq), uint64(uptimeUsec-minutesAgo*60e6), fmt.Sprintf("watchdog: BUG: soft lockup - CPU#%d stuck for 23s! [java:4242]", seq))
	}
	vault := func(minutesAgo float64) map[string]string {
		return map[string]string{"MESSAGE": "path error on /vol/a7", "_SYSTEMD_UNIT": "vault-agent.service", "_UID": "0",
			"_PID": "4321", "__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().Add(-time.Duration(minutesAgo * float64(time.Minute))).UnixMicro())}
	}
	root := hostroot.New(t).WithProc()
	// Two of each before the first agent starts, 20 minutes ago: older
	// than the kernel log's lookback of 10 minutes, within the window.
	root.AppendKmsg(lockup(1, 20), lockup(2, 19))
	root.AppendJournal(vault(20), vault(19))
	first := startAgent(t, root, fileJournal+promoted)
	first.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	first.cancel()
	<-first.done
	first.done <- nil // for its cleanup

	// The second agent of the same node, as after a restart.
	second := startAgentWith(t, root, fileJournal+promoted, corev1.NodeSpec{}, func(o *Options) { o.NodeName = first.node })
	second.node = first.node
	time.Sleep(time.Second) // the replay is read
	n := second.waitNode("", func(*corev1.Node) bool { return true })
	if c := condition(n, health.KernelReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("promoted on two occurrences: %+v", c)
	}
	root.AppendKmsg(lockup(3, 0))
	n = second.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, "CustomRepeatedSoftLockups"))
	if c := condition(n, health.KernelReady); !strings.Contains(c.Message, "SoftLockup 3 times within 30m0s") {
		t.Errorf("message %q", c.Message)
	}
	root.AppendJournal(vault(0))
	second.waitNode("the journal's promotion too", func(n *corev1.Node) bool {
		c := condition(n, health.KernelReady)
		return c != nil && strings.Contains(c.Message, "CustomVaultPathFailing")
	})
	// The replayed journal entries raised no Events: only the live one did.
	if evs := second.eventsOf("CustomVaultPathError"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("events of the journal rule %+v", evs)
	}
}
