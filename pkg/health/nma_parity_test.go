package health

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestEKSNodeMonitoringAgentParity: every reason of the EKS Node Monitoring
// Agent (testdata, from its public reason table) is one nodemend reports, with
// the same string, condition and severity, so alerts, dashboards and repair
// policies written for it keep working. A templated name is a family here
// (NvidiaXID%dError is NvidiaXIDError, whose members all share its condition
// and severity); %sRepeatedRestart is nodemend's RepeatedRestart, which names
// the unit in its subject rather than in the reason.
func TestEKSNodeMonitoringAgentParity(t *testing.T) {
	f, err := os.Open("testdata/eks-node-monitoring-agent-reasons.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			t.Fatalf("bad line %q", line)
		}
		name, cond, sev := fields[0], ConditionType(fields[1]), Severity(fields[2])
		n++
		switch {
		case strings.Contains(name, "%d"):
			fam := strings.Replace(name, "%d", "", 1)
			switch {
			case fam == "DCGMHealthCode" && sev == Fatal:
				checkFamily(t, "DCGMHealthCodeFatal", cond, sev)
			case fam == "DCGMHealthCode":
				// The agent's Warning health codes: nodemend's family is every
				// code, its members Fatal where DCGM can grade them so and
				// lowered per finding (docs/accelerators.md, "DCGM").
				checkFamily(t, fam, cond, "")
			default:
				checkFamily(t, fam, cond, sev)
			}
		case name == "%sRepeatedRestart":
			checkReason(t, "RepeatedRestart", cond, sev)
		default:
			checkReason(t, name, cond, sev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 75 {
		t.Fatalf("%d reasons in the list, want the agent's 75", n)
	}
}

func checkReason(t *testing.T, name string, cond ConditionType, sev Severity) {
	t.Helper()
	r, ok := LookupReason(name)
	if !ok {
		t.Errorf("%s: not a nodemend reason", name)
		return
	}
	if r.Condition != cond || r.Severity != sev {
		t.Errorf("%s: nodemend %s %s, the EKS agent %s %s", name, r.Condition, r.Severity, cond, sev)
	}
}

// checkFamily: the family is accepted where a reason is named and its
// members have the agent's condition and severity (any severity where sev
// is empty).
func checkFamily(t *testing.T, name string, cond ConditionType, sev Severity) {
	t.Helper()
	members, ok := Expand(name)
	if !ok || len(members) == 0 {
		t.Errorf("%s: not a nodemend family", name)
		return
	}
	for _, m := range members {
		if r, _ := LookupReason(m); r.Condition != cond || (sev != "" && r.Severity != sev) {
			t.Errorf("%s member %s: nodemend %s %s, the EKS agent %s %s", name, m, r.Condition, r.Severity, cond, sev)
		}
	}
}
