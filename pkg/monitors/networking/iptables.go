package networking

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- PortConflict, UnexpectedRejectRule --------------------------------------

// RulesetReader dumps the iptables rules of the inspected network namespace,
// calling fn with each line of iptables-save's output (iptables-save(8)):
// "*table", ":CHAIN POLICY [p:b]", "-A CHAIN match... -j TARGET", "COMMIT".
// family is 4 or 6.
type RulesetReader interface {
	Ruleset(ctx context.Context, family int, fn func(line []byte)) error
}

// IPTablesSave dumps rulesets with the iptables-save of the agent's image
// (or of the host for a systemd agent). The kernel keeps two independent
// rulesets, both applied: nf_tables, which iptables-nft writes, and the
// legacy xtables one. nf_tables is always dumped (it may be built into the
// kernel, with nothing in /sys/module to tell); the legacy ruleset only
// when the namespace has legacy tables (/proc/net/ip{,6}_tables_names), so
// that dumping never loads the legacy modules into a host without them.
type IPTablesSave struct {
	HostRoot string
}

// iptablesTimeout bounds the dumps: iptables-save of a large kube-proxy
// ruleset takes seconds.
const iptablesTimeout = time.Minute

// maxRulesetOutput bounds one dump: ~150 bytes a rule, a million rules.
const maxRulesetOutput = 150 << 20

// ErrNoIPTables is returned when no iptables-save is installed.
var ErrNoIPTables = errors.New("iptables-save is not installed")

// Ruleset implements RulesetReader. It runs in the namespace's thread.
func (s IPTablesSave) Ruleset(ctx context.Context, family int, fn func(line []byte)) error {
	root := s.HostRoot
	if root == "" {
		root = "/"
	}
	ip := "ip"
	if family == 6 {
		ip = "ip6"
	}
	// thread-self: the thread may be in another namespace than the process.
	names, err := os.ReadFile(filepath.Join(root, "proc/thread-self/net", ip+"_tables_names"))
	legacy := err == nil && len(bytes.TrimSpace(names)) > 0
	tools := []string{ip + "tables-nft-save"}
	if legacy {
		tools = append(tools, ip+"tables-legacy-save")
	}
	ran := false
	for _, t := range tools {
		p, err := exec.LookPath(t)
		if err != nil {
			continue
		}
		ran = true
		if err := childproc.Lines(ctx, childproc.Tool{Path: p, Limit: maxRulesetOutput}, fn); err != nil {
			return err
		}
	}
	if ran {
		return nil
	}
	// Only the generic name is installed: it dumps the backend it was built for.
	p, err := exec.LookPath(ip + "tables-save")
	if err != nil {
		return fmt.Errorf("%w (no %s or %s)", ErrNoIPTables, strings.Join(tools, ", "), ip+"tables-save")
	}
	return childproc.Lines(ctx, childproc.Tool{Path: p, Limit: maxRulesetOutput}, fn)
}

// iptRule is what the checks need of one "-A" line.
type iptRule struct {
	Family       int
	Table, Chain string
	// Target is -j's (or -g's) argument.
	Target     string
	RejectWith string
	// DPorts are the destination ports matched (--dport, --dports,
	// --destination-port), ranges as "low:high"; a negated match is left out.
	DPorts []string
	// Dest is -d's argument ("" for any); DstLocal is -m addrtype
	// --dst-type LOCAL.
	Dest     string
	DstLocal bool
	// CTInvalid is a conntrack or state match on INVALID.
	CTInvalid bool
	Comment   string
	Raw       string
}

// interesting is the literal prefilter of the rule lines worth parsing: on
// a node with tens of thousands of kube-proxy rules, most lines jump to
// another chain and are skipped unparsed.
func interesting(line []byte) bool {
	return bytes.HasPrefix(line, []byte("-A ")) && (bytes.Contains(line, []byte(" -j DROP")) || bytes.Contains(line, []byte(" -j REJECT")) ||
		bytes.Contains(line, []byte(" -g DROP")) || bytes.Contains(line, []byte(" -j DNAT")) || bytes.Contains(line, []byte("--reject-with")))
}

// rulesetCollector parses a dump line by line, keeping the interesting rules.
type rulesetCollector struct {
	family int
	table  string
	rules  []iptRule
	seen   map[string]bool
}

func (c *rulesetCollector) line(b []byte) {
	switch {
	case len(b) > 1 && b[0] == '*':
		c.table = string(bytes.TrimSpace(b[1:]))
	case interesting(b):
		r := parseIPTRule(string(b))
		r.Family, r.Table = c.family, c.table
		key := fmt.Sprint(r.Family, r.Table, r.Raw)
		if c.seen == nil {
			c.seen = map[string]bool{}
		}
		if !c.seen[key] { // the same rule in both backends, or dumped twice
			c.seen[key] = true
			c.rules = append(c.rules, r)
		}
	}
}

// splitArgs splits an iptables-save rule into arguments. Arguments with
// spaces are double-quoted, with '"' and '\' escaped by a backslash
// (xtables save_string).
func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, escaped, have := false, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			cur.WriteByte(c)
			escaped = false
		case c == '\\' && inQuote:
			escaped = true
		case c == '"':
			inQuote = !inQuote
			have = true
		case c == ' ' && !inQuote:
			if have || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
		}
	}
	if have || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// parseIPTRule reads one "-A CHAIN ..." line of iptables-save.
func parseIPTRule(line string) iptRule {
	r := iptRule{Raw: line}
	args := splitArgs(line)
	negate := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch a {
		case "!":
			negate = true
			continue
		case "-A", "--append":
			r.Chain = next()
		case "-j", "--jump", "-g", "--goto":
			r.Target = next()
		case "--reject-with":
			r.RejectWith = next()
		case "-d", "--destination":
			if d := next(); !negate {
				r.Dest = d
			}
		case "--dport", "--destination-port", "--dports", "--destination-ports":
			if v := next(); !negate {
				r.DPorts = append(r.DPorts, strings.Split(v, ",")...)
			}
		case "--dst-type":
			if v := next(); !negate && strings.Contains(","+v+",", ",LOCAL,") {
				r.DstLocal = true
			}
		case "--ctstate", "--state":
			if v := next(); !negate && strings.Contains(","+v+",", ",INVALID,") {
				r.CTInvalid = true
			}
		case "--comment":
			r.Comment = next()
		}
		negate = false
	}
	return r
}

// nodeDaemonPorts are the node daemons' ports a DNAT rule must not take:
// the API server reaches the kubelet on 10250 for logs, exec and metrics.
var nodeDaemonPorts = map[int]string{10250: "the kubelet"}

// managedChainPrefixes are chains that Kubernetes, the CNIs and the
// container engines create and own; their REJECT and DROP rules are the
// components' policy (services without endpoints, network policies, source
// ranges, isolation between bridges).
var managedChainPrefixes = []string{
	"KUBE-",                                                  // kube-proxy, kube-router (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*)
	"cali-",                                                  // Calico
	"CILIUM_",                                                // Cilium
	"ANTREA-",                                                // Antrea
	"WEAVE-NPC",                                              // Weave Net's policy controller
	"AWS-",                                                   // the VPC CNI (AWS-SNAT-CHAIN-*, AWS-CONNMARK-CHAIN-*)
	"CNI-",                                                   // CNI plugins: portmap, firewall, bandwidth
	"FLANNEL-",                                               // flannel
	"DOCKER-ISOLATION-", "DOCKER-FORWARD", "DOCKER-INTERNAL", // Docker's bridge isolation
	"NETAVARK_", // podman
	"OVN-KUBE-", // OVN-Kubernetes
}

// iptablesVerdict is the pure evaluation of the rules: PortConflict for a
// DNAT that takes a node daemon's port on the node's addresses, and
// UnexpectedRejectRule for the REJECT or DROP rules outside managed and
// allowed chains, one finding per chain.
func iptablesVerdict(rules []iptRule, allowed map[string]bool, now time.Time) []detection.Finding {
	var fs []detection.Finding
	type chainKey struct {
		family       int
		table, chain string
	}
	unexpected := map[chainKey][]iptRule{}
	for _, r := range rules {
		if r.Target == "DNAT" {
			if port, daemon, ok := takesDaemonPort(r); ok {
				fs = append(fs, detection.Finding{
					Reason: health.ReasonPortConflict,
					Message: fmt.Sprintf("iptables%s %s/%s redirects TCP port %d, %s's, elsewhere (a pod's hostPort?): the API server can no longer reach %s: %s",
						familySuffix(r.Family), r.Table, r.Chain, port, daemon, daemon, r.Raw),
					Observed: now,
					Subject:  fmt.Sprintf("%s/%s:%d", r.Table, r.Chain, port),
				})
			}
			continue
		}
		if r.Target != "REJECT" && r.Target != "DROP" && r.RejectWith == "" {
			continue
		}
		if expectedReject(r, allowed) {
			continue
		}
		k := chainKey{r.Family, r.Table, r.Chain}
		unexpected[k] = append(unexpected[k], r)
	}
	keys := make([]chainKey, 0, len(unexpected))
	for k := range unexpected {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.family != b.family {
			return a.family < b.family
		}
		if a.table != b.table {
			return a.table < b.table
		}
		return a.chain < b.chain
	})
	for _, k := range keys {
		rs := unexpected[k]
		msg := fmt.Sprintf("iptables%s %s/%s has %d REJECT or DROP rule(s) outside the chains Kubernetes and the CNIs manage, e.g. %q: expected traffic may be blocked; "+
			"if the chain is known to be good, add %q to the networking monitor's allowedIPTablesChains", familySuffix(k.family), k.table, k.chain, len(rs), rs[0].Raw, k.table+"/"+k.chain)
		fs = append(fs, detection.Finding{
			Reason:   health.ReasonUnexpectedRejectRule,
			Message:  msg,
			Observed: now,
			Subject:  fmt.Sprintf("%s/%s%s", k.table, k.chain, familySuffix(k.family)),
		})
	}
	return fs
}

func familySuffix(family int) string {
	if family == 6 {
		return " (IPv6)"
	}
	return ""
}

// takesDaemonPort reports whether a DNAT rule matches a node daemon's port
// for any destination or the node's own addresses (portmap's hostPort
// rules); a DNAT for one other address (a service VIP) does not take the
// daemon's port.
func takesDaemonPort(r iptRule) (int, string, bool) {
	anyDest := r.Dest == "" || r.Dest == "0.0.0.0/0" || r.Dest == "::/0"
	if !anyDest && !r.DstLocal {
		return 0, "", false
	}
	for _, p := range r.DPorts {
		lo, hi := p, p
		if a, b, ok := strings.Cut(p, ":"); ok {
			lo, hi = a, b
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			continue
		}
		for port, daemon := range nodeDaemonPorts {
			if port >= l && port <= h {
				return port, daemon, true
			}
		}
	}
	return 0, "", false
}

// expectedReject reports whether a REJECT or DROP rule is one the node is
// meant to have.
func expectedReject(r iptRule, allowed map[string]bool) bool {
	if allowed[r.Table+"/"+r.Chain] {
		return true
	}
	for _, p := range managedChainPrefixes {
		if strings.HasPrefix(r.Chain, p) {
			return true
		}
	}
	switch {
	case r.CTInvalid:
		// Dropping packets conntrack cannot place is hygiene (kube-proxy
		// and most host firewalls do it), never a blocked connection.
		return true
	case strings.Contains(r.Comment, "Block Node Local Pod access"):
		// The VPC CNI's rule against pods reaching link-local node services.
		return true
	}
	return false
}

func (m *Monitor) runIPTables(ctx context.Context) ([]detection.Finding, error) {
	rules, err := gatherFor(ctx, m, &m.iptGuard, "iptables-save", iptablesTimeout, func() ([]iptRule, error) {
		tctx, cancel := context.WithTimeout(ctx, iptablesTimeout)
		defer cancel()
		var all []iptRule
		for _, family := range []int{4, 6} {
			c := &rulesetCollector{family: family}
			if err := m.opts.Ruleset.Ruleset(tctx, family, c.line); err != nil {
				return nil, err
			}
			all = append(all, c.rules...)
		}
		return all, nil
	})
	if err != nil {
		return nil, err
	}
	allowed := map[string]bool{}
	for _, c := range m.opts.AllowedIPTablesChains {
		allowed[c] = true
	}
	return iptablesVerdict(rules, allowed, m.env.Clock.Now()), nil
}
