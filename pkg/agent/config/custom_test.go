package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// customExample is docs/agent-config.md's worked example: an in-house
// driver's kernel line, a storage appliance's daemon, a site file, a site
// check script, and XID 13 five times in ten minutes.
const customExample = `
customRules:
  - reason: CustomAcmeNICLinkReset
    condition: NetworkingReady
    severity: Fatal
    description: The ACME NIC did not come back from a reset.
    source: kmsg
    accept: [kernel]
    contains: ["acmenic", "link reset timeout"]
    pattern: 'acmenic (?P<dev>\S+): link reset timeout after (?P<ms>\d+) ms'
    message: "ACME NIC ${dev} did not come back from a reset in ${ms} ms"
    quietPeriod: 1h
  - reason: CustomVaultPathError
    condition: StorageReady
    severity: Warning
    source: journal
    unit: vault-agent.service
    accept: [unit:vault-agent.service]
    contains: ["path error on"]
    pattern: 'path error on (?P<path>\S+)'
    promote: {count: 3, within: 5m, reason: CustomVaultPathFailing}
  - reason: CustomSiteFileCheck
    condition: KernelReady
    severity: Info
    source: file
    file: /var/log/site/check.log
    accept: [file:/var/log/site/check.log]
    contains: ["FAILED"]
customChecks:
  - reason: CustomSiteNFSMounted
    condition: StorageReady
    severity: Fatal
    command: [/usr/local/sbin/check-nfs, --quick]
    period: 1m
    timeout: 10s
reasons:
  NvidiaXID13Warning:
    promote: {count: 5, within: 10m, to: Fatal, reason: CustomXID13Repeated}
`

func TestCustomRulesChecksAndPromotions(t *testing.T) {
	c, err := Parse([]byte(customExample))
	if err != nil {
		t.Fatal(err)
	}
	rs := c.CustomReasons()
	for name, want := range map[string]struct {
		cond  health.ConditionType
		sev   health.Severity
		src   health.Source
		quiet time.Duration
	}{
		"CustomAcmeNICLinkReset": {health.NetworkingReady, health.Fatal, health.FromLog, time.Hour},
		"CustomVaultPathError":   {health.StorageReady, health.Warning, health.FromLog, 0},
		"CustomVaultPathFailing": {health.StorageReady, health.Fatal, health.FromLog, DefaultCustomQuietPeriod},
		"CustomSiteFileCheck":    {health.KernelReady, health.Info, health.FromLog, 0},
		"CustomSiteNFSMounted":   {health.StorageReady, health.Fatal, health.FromCheck, 0},
		"CustomXID13Repeated":    {health.AcceleratedHardwareReady, health.Fatal, health.FromLog, DefaultCustomQuietPeriod},
	} {
		r, ok := rs[name]
		if !ok || r.Condition != want.cond || r.Severity != want.sev || r.Source != want.src || r.QuietPeriod != want.quiet {
			t.Errorf("%s: %+v (found %v), want %+v", name, r, ok, want)
		}
		if e, on := c.Effective(name); !on || e.Name != name {
			t.Errorf("Effective(%s) = %+v, %v", name, e, on)
		}
	}
	if len(rs) != 6 {
		t.Errorf("%d custom reasons: %v", len(rs), rs)
	}
	p := c.Promotions()
	if p[health.ReasonNvidiaXID13Warning].Count != 5 || p["CustomVaultPathError"].Reason != "CustomVaultPathFailing" || len(p) != 2 {
		t.Errorf("promotions %+v", p)
	}
	if got := c.LogFiles(); len(got) != 1 || got[0] != "/var/log/site/check.log" {
		t.Errorf("log files %v", got)
	}
	lr := c.CustomRules[1].LogRule()
	if len(lr.Sources) != 1 || lr.Sources[0] != logline.Journal || lr.Accept[0] != logline.ByUnit("vault-agent.service") {
		t.Errorf("log rule %+v", lr)
	}
	if _, on := c.Effective("CustomNoSuchReason"); on {
		t.Error("an undefined custom reason is effective")
	}
}

// Hostile and broken rules are refused with the rule and the field named;
// the whole config is refused (Parse returns no config: the agent keeps
// its last good one, TestHostileCustomRuleKeepsTheLastGoodConfig).
func TestCustomRulesAreRefusedNamingRuleAndField(t *testing.T) {
	rule := func(fields string) string {
		return "customRules:\n  - reason: CustomX\n    condition: KernelReady\n    severity: Fatal\n    source: kmsg\n    accept: [kernel]\n    contains: [xyz]\n" + fields
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"a registry reason's name":   {strings.Replace(rule(""), "CustomX", "KernelBug", 1), `customRules[0] (KernelBug).reason: reason "KernelBug" must start with "Custom"`},
		"no prefix":                  {strings.Replace(rule(""), "CustomX", "AcmeNICDown", 1), `customRules[0] (AcmeNICDown).reason: reason "AcmeNICDown" must start with "Custom"`},
		"the bare prefix":            {strings.Replace(rule(""), "CustomX", "Custom", 1), `customRules[0] (Custom).reason`},
		"not UpperCamelCase":         {strings.Replace(rule(""), "CustomX", "Custom_x", 1), `customRules[0] (Custom_x).reason: reason "Custom_x" must be UpperCamelCase`},
		"two rules, one name":        {rule("") + "  - reason: CustomX\n    condition: KernelReady\n    severity: Warning\n    source: kmsg\n    accept: [kernel]\n    contains: [abc]\n", `customRules[1] (CustomX).reason: reason CustomX is already defined by customRules[0] (CustomX).reason`},
		"a promotion's name taken":   {rule("") + "  - reason: CustomY\n    condition: KernelReady\n    severity: Warning\n    source: kmsg\n    accept: [kernel]\n    contains: [abc]\n    promote: {count: 2, within: 1m, reason: CustomX}\n", `customRules[1] (CustomY).promote.reason: reason CustomX is already defined`},
		"an unknown condition":       {strings.Replace(rule(""), "KernelReady", "Ready", 1), `customRules[0] (CustomX).condition: "Ready" is not one of`},
		"an unknown severity":        {strings.Replace(rule(""), "Fatal", "Critical", 1), `customRules[0] (CustomX).severity: "Critical" is not Fatal, Warning or Info`},
		"no accept":                  {strings.Replace(rule(""), "    accept: [kernel]\n", "", 1), `customRules[0] (CustomX).accept: name the writers`},
		"kmsg believing root":        {strings.Replace(rule(""), "[kernel]", "[root]", 1), `customRules[0] (CustomX).accept: "root": a kmsg rule believes the kernel only`},
		"journal of another unit":    {strings.Replace(strings.Replace(rule(""), "source: kmsg", "source: journal\n    unit: a.service", 1), "[kernel]", "[unit:b.service]", 1), `customRules[0] (CustomX).accept: "unit:b.service" is another unit`},
		"journal without a unit":     {strings.Replace(rule(""), "source: kmsg", "source: journal", 1), `customRules[0] (CustomX).unit: a journal rule names the unit`},
		"a relative file":            {strings.Replace(strings.Replace(rule(""), "source: kmsg", "source: file\n    file: var/log/x", 1), "[kernel]", "[file]", 1), `customRules[0] (CustomX).file: "var/log/x" must be an absolute, clean path`},
		"a file escaping":            {strings.Replace(strings.Replace(rule(""), "source: kmsg", "source: file\n    file: /var/../../etc/shadow", 1), "[kernel]", "[file]", 1), `customRules[0] (CustomX).file: "/var/../../etc/shadow" must be an absolute, clean path`},
		"no prefilter":               {strings.Replace(rule(""), "    contains: [xyz]\n", "", 1), `customRules[0] (CustomX).contains: at least one literal is required`},
		"an empty literal":           {strings.Replace(rule(""), "[xyz]", `[""]`, 1), `customRules[0] (CustomX).contains: a literal has 1 to 256 bytes`},
		"a huge literal":             {strings.Replace(rule(""), "[xyz]", "["+strings.Repeat("a", 300)+"]", 1), `customRules[0] (CustomX).contains: a literal has 1 to 256 bytes`},
		"a bad pattern":              {rule("    pattern: 'a(b'\n"), `customRules[0] (CustomX).pattern: error parsing regexp: missing closing )`},
		"a backreference (not RE2)":  {rule("    pattern: '(a)\\1'\n"), `customRules[0] (CustomX).pattern: error parsing regexp: invalid escape sequence`},
		"a catastrophic pattern":     {rule("    pattern: '((a{100}){100}){100}'\n"), `customRules[0] (CustomX).pattern: `},
		"a huge pattern":             {rule("    pattern: '" + strings.Repeat("a", 2000) + "'\n"), `customRules[0] (CustomX).pattern: 2000 bytes, more than 1024`},
		"a message group missing":    {rule("    pattern: 'x(?P<a>y)'\n    message: '${b}'\n"), `customRules[0] (CustomX).message: ${b} is not a named group of the pattern`},
		"a quiet period too short":   {rule("    quietPeriod: 10s\n"), `customRules[0] (CustomX).quietPeriod: 10s is shorter than the 1m0s floor`},
		"promoting a Fatal":          {rule("    promote: {count: 2, within: 1m, reason: CustomY}\n"), `customRules[0] (CustomX).promote.reason: only a Warning reason is promoted`},
		"a huge count":               {strings.Replace(rule("    promote: {count: 100000000, within: 1m, reason: CustomY}\n"), "Fatal", "Warning", 1), `customRules[0] (CustomX).promote.count: 100000000 must be between 2 and 1000`},
		"a huge window":              {strings.Replace(rule("    promote: {count: 3, within: 8760h, reason: CustomY}\n"), "Fatal", "Warning", 1), `customRules[0] (CustomX).promote.within: 8760h0m0s must be between 1s and 24h0m0s`},
		"promoting to Warning":       {strings.Replace(rule("    promote: {count: 3, within: 1m, to: Warning, reason: CustomY}\n"), "Fatal", "Warning", 1), `customRules[0] (CustomX).promote.to: "Warning": a promotion goes to Fatal`},
		"promoting a family":         {"reasons:\n  NvidiaXIDWarning:\n    promote: {count: 3, within: 1m, reason: CustomY}\n", `reasons.NvidiaXIDWarning.promote: promote one reason, not a family`},
		"promoting a registry Fatal": {"reasons:\n  ForkFailedOutOfPIDs:\n    promote: {count: 3, within: 1m, reason: CustomY}\n", `reasons.ForkFailedOutOfPIDs.promote.reason: only a Warning reason is promoted (this one is Fatal)`},
		"overriding a custom reason": {rule("") + "reasons:\n  CustomX:\n    disabled: true\n", `reasons.CustomX: a custom reason is configured where it is defined`},
		"a check without command":    {"customChecks:\n  - reason: CustomC\n    condition: KernelReady\n    severity: Fatal\n    command: []\n    period: 1m\n", `customChecks[0] (CustomC).command: the program to run is required`},
		"a check too often":          {"customChecks:\n  - reason: CustomC\n    condition: KernelReady\n    severity: Fatal\n    command: [/bin/true]\n    period: 1s\n", `customChecks[0] (CustomC).period: 1s is shorter than 10s`},
		"a timeout past the period":  {"customChecks:\n  - reason: CustomC\n    condition: KernelReady\n    severity: Fatal\n    command: [/bin/true]\n    period: 30s\n    timeout: 1m\n", `customChecks[0] (CustomC).timeout: 1m0s must be shorter than the period 30s`},
		"a relative program path":    {"customChecks:\n  - reason: CustomC\n    condition: KernelReady\n    severity: Fatal\n    command: [bin/check]\n    period: 30s\n", `customChecks[0] (CustomC).command: "bin/check" must be an absolute, clean path`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// More custom reasons than the cap are refused: each is a metric label
// and an Event reason.
func TestCustomReasonsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("customRules:\n")
	for i := range MaxCustomReasons + 1 {
		fmt.Fprintf(&b, "  - {reason: CustomR%d, condition: KernelReady, severity: Warning, source: kmsg, accept: [kernel], contains: [lit%d]}\n", i, i)
	}
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "define 129 reasons, more than the 128 allowed") {
		t.Fatalf("%v", err)
	}
}
