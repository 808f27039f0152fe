package collectors_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
)

// The property: whatever form a secret takes and wherever it lands relative
// to a tail window, a line cut or a size cap, no 8 characters of it leave
// the node. Each run plants every form below at random places of a fake
// host (log files cut by a random tail window, config files, process
// command lines and environments, journal output that starts anywhere, the
// agent's own config), with random per-file and bundle caps, runs every
// collector into a bundle, and reads every entry of it.

// gen makes secrets: random, so that 8 characters of one are found nowhere
// else.
type gen struct{ rnd *rand.Rand }

const (
	alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b64ch = alnum + "+/"
)

// raw is n random characters of alphabet.
func (g *gen) raw(alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.rnd.IntN(len(alphabet))]
	}
	return string(b)
}

// from is raw with upper case, lower case and a digit at its start.
func (g *gen) from(alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.rnd.IntN(len(alphabet))]
	}
	// Random strings this long always mix classes; make sure these do.
	copy(b, alnum[g.rnd.IntN(26):][:1]+alnum[26+g.rnd.IntN(26):][:1]+alnum[52+g.rnd.IntN(10):][:1])
	return string(b)
}

// secret is a password-like value over alphabet (with symbols the form
// allows).
func (g *gen) secret(symbols string) string { return g.from(alnum+symbols, 12+g.rnd.IntN(28)) }

func (g *gen) pick(s ...string) string { return s[g.rnd.IntN(len(s))] }

// planting is one planted form: its lines, the secrets in it, and where it
// may go.
type planting struct {
	form    string
	lines   []string
	secrets []string
	// env: the form is NAME=value entries (a process environment may hold
	// it); argv: it is command-line arguments.
	env  []string
	argv []string
}

func secretNames() []string {
	return []string{"DB_PASSWORD", "VAULT_AUTH_TOKEN", "OAUTH_CLIENT_SECRET", "JWT_SIGNING_KEY", "AWS_SECRET_ACCESS_KEY",
		"GITHUB_TOKEN", "STRIPE_API_KEY", "PGPASSWORD", "MYSQL_ROOT_PASSWORD", "REDIS_PASS", "SENTRY_DSN", "SESSION_COOKIE_SECRET",
		"authToken", "signingKey", "clientSecret", "privateKey", "apiKey", "x-api-key", "registry.password", "kubelet_bootstrap_token"}
}

func (g *gen) name() string { return g.pick(secretNames()...) }

// pem makes a private key block: its lines and its body lines (the secret).
func (g *gen) pem(label string, width int) ([]string, []string) {
	var body []string
	for i := 0; i < 3+g.rnd.IntN(20); i++ {
		body = append(body, g.from(b64ch, width))
	}
	body = append(body, g.from(b64ch, 8+g.rnd.IntN(width-8))+"==")
	return append(append([]string{"-----BEGIN " + label + "-----"}, body...), "-----END "+label+"-----"), body
}

// forms is every form of the issue; each call makes a fresh one.
func (g *gen) forms() []planting {
	var ps []planting
	add := func(form string, lines []string, secrets ...string) {
		ps = append(ps, planting{form: form, lines: lines, secrets: secrets})
	}
	envSafe := "_-.+/=@%:,!"
	s := g.secret(envSafe)
	n := g.name()
	ps = append(ps, planting{form: "env", lines: []string{n + "=" + s}, secrets: []string{s}, env: []string{n + "=" + s}})
	s = g.secret(" !#$%&*()-_=+[]{};:,.<>/?@")
	n = g.name()
	ps = append(ps, planting{form: "env with spaces", lines: []string{"export " + n + "=\"" + s + "\""}, secrets: []string{s}, env: []string{n + "=" + s}})
	s = g.secret("_-.+/=@%!")
	add("yaml", []string{"  " + g.name() + ": " + s}, s)
	s = g.secret(" !$%&*()-_=+[]{};:,.<>/?@")
	add("yaml quoted", []string{"  " + g.name() + ": '" + s + "' # rotated"}, s)
	s1, s2 := g.secret("_-.+/=@%!"), g.secret("_-.+/=@%!")
	add("yaml block", []string{"  " + g.name() + ": |", "    " + s1, "    " + s2, "  other: x"}, s1, s2)
	w1, w2 := g.secret(""), g.secret("")
	add("yaml folded", []string{g.name() + ": " + strings.Repeat("correct horse "+w1+" ", 4), "  battery staple " + w2}, w1, w2)
	s = g.secret(" !#$%&*()-_=+[]{};:,.<>/?@'")
	j, _ := json.Marshal(map[string]string{g.name(): s, "user": "bot"})
	add("json", []string{string(j)}, s)
	s = g.secret("_-.+/=@%!")
	add("escaped json in a log", []string{`level=info msg="loaded {\"` + g.name() + `\": \"` + s + `\"}"`}, s)
	s = g.secret(" !#$%&*()-_+[]{};:,.<>/?@")
	add("ini", []string{g.pick("password", "aws_secret_access_key", "token", "secret") + " = " + s}, s)
	s = g.secret(" !#$%&*()-_=+[]{};:,.<>/?@'")
	add("toml", []string{"  " + g.pick("password", "auth", "identitytoken", "token") + ` = "` + s + `"`}, s)
	s = g.secret("!#$%*()-_=+[]{};:,./?@")
	add("xml", []string{"<" + g.pick("password", "Password", "secret", "apiKey") + ">" + s + "</" + "x>"}, s)
	s = g.secret("!$*-_.~+@")
	add("url", []string{"pulling from " + g.pick("https", "postgres", "amqp", "mongodb+srv") + "://robot:" + s + "@registry.example.com/v2/app"}, s)
	s = g.secret("!$*-_.~+@")
	add("url empty user", []string{"cache redis://:" + s + "@cache.internal:6379/0"}, s)
	s = g.secret("!$*-_.~+")
	add("mysql dsn", []string{"dsn app:" + s + "@tcp(db:3306)/app?parseTime=true"}, s)
	s = g.secret("!$*-_.~+@")
	add("postgres kv dsn", []string{"connecting host=db port=5432 user=app password=" + s + " dbname=app"}, s)
	s = g.secret("!$*-_.~+@")
	add("ado connection string", []string{"Server=tcp:db,1433;Database=app;User Id=sa;Password=" + s + ";Encrypt=true"}, s)
	s = g.from(alnum+"-._~+/", 20+g.rnd.IntN(40))
	add("bearer header", []string{"GET /api with Authorization: Bearer " + s}, s)
	s = g.secret("-._~")
	add("custom header", []string{g.pick("X-Auth-Token", "X-Api-Key", "PRIVATE-TOKEN", "X-Vault-Token") + ": " + s}, s)
	s = g.secret("-._~")
	add("cookie", []string{"Cookie: theme=dark; session=" + s + "; lang=en"}, s)
	s = g.secret("-._~+/=@%!")
	ps = append(ps, planting{form: "flag", lines: []string{"/usr/bin/agent --" + g.pick("token", "client-secret", "password", "api-key") + "=" + s + " --v=2"}, secrets: []string{s},
		argv: []string{"/usr/bin/agent", "--client-secret=" + s, "--v=2"}})
	s = g.secret(" -._~+/=@%!")
	ps = append(ps, planting{form: "flag with space", lines: []string{"kubeadm join 10.0.0.1:6443 --token " + strings.ReplaceAll(s, " ", "") + " --discovery-token-unsafe-skip-ca-verification"},
		secrets: []string{strings.ReplaceAll(s, " ", "")}, argv: []string{"/usr/bin/tool", "--password", s, "--verbose"}})
	s = g.secret("-._~+/=!")
	ps = append(ps, planting{form: "curl -u", lines: []string{"+ curl -sf -u admin:" + s + " https://artifacts.internal/x"}, secrets: []string{s},
		argv: []string{"curl", "-sf", "-u", "admin:" + s, "https://artifacts.internal/x"}})
	s = g.secret("-._~+/=!")
	ps = append(ps, planting{form: "mysql -p", lines: []string{"mysql -uroot -p" + s + " app"}, secrets: []string{s}, argv: []string{"mysql", "-uroot", "-p" + s, "app"}})
	for _, tok := range []string{
		"AKIA" + g.raw("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16), "ASIA" + g.raw("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
		"ghp_" + g.from(alnum, 36), "github_pat_" + g.from(alnum+"_", 70), "glpat-" + g.from(alnum+"_-", 20),
		"xoxb-" + g.from("0123456789", 12) + "-" + g.from("0123456789", 12) + "-" + g.from(alnum, 24),
		"sk_live_" + g.from(alnum, 24), "AIza" + g.from(alnum+"_-", 35), "ya29." + g.from(alnum+"_-", 60),
		"npm_" + g.from(alnum, 36), "hvs." + g.from(alnum+"_-", 24), "dckr_pat_" + g.from(alnum+"_-", 27),
		"SG." + g.from(alnum+"_-", 22) + "." + g.from(alnum+"_-", 43),
		"eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"`+g.from(alnum, 20)+`"}`)) + "." + g.from(alnum+"_-", 43),
	} {
		add("token "+tok[:4], []string{"request with " + tok + " failed"}, tok)
	}
	s = g.from(b64ch, 40)
	add("aws secret without a name", []string{"aws configure set aws_secret_access_key " + s}, s)
	s = g.from(b64ch, 86) + "=="
	add("azure storage key", []string{"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + s + ";EndpointSuffix=core.windows.net"}, s)
	s = g.from(alnum+"%", 30)
	add("sas url", []string{"PUT https://acct.blob.core.windows.net/c/x?sv=2022-11-02&ss=b&sig=" + s + "&se=2030-01-01"}, s)
	s = g.from(alnum, 40)
	add("presigned url", []string{"PUT https://b.s3.amazonaws.com/x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=" + s + "&X-Amz-Date=20240612T000000Z"}, s)
	for _, k := range []struct {
		label string
		width int
	}{{"RSA PRIVATE KEY", 64}, {"EC PRIVATE KEY", 64}, {"PRIVATE KEY", 64}, {"ENCRYPTED PRIVATE KEY", 64}, {"OPENSSH PRIVATE KEY", 70}} {
		lines, body := g.pem(k.label, k.width)
		add("pem "+k.label, lines, body...)
	}
	lines, body := g.pem("PRIVATE KEY", 64)
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "private_key_id": g.from("0123456789abcdef", 40), "private_key": strings.Join(lines, "\n") + "\n"})
	add("service account json", []string{string(sa)}, body...)
	lines, body = g.pem("RSA PRIVATE KEY", 64)
	enc := base64.StdEncoding.EncodeToString([]byte(strings.Join(lines, "\n") + "\n"))
	add("base64 pem", []string{"    client-key-data: " + enc}, enc[16:])
	var wrapped []string
	for rest := enc; len(rest) > 0; rest = rest[min(76, len(rest)):] {
		wrapped = append(wrapped, rest[:min(76, len(rest))])
	}
	add("base64 pem wrapped", wrapped, wrapped[1:]...)
	priv := g.from(b64ch, 44)
	add("putty key", []string{"PuTTY-User-Key-File-3: ssh-ed25519", "Encryption: none", "Comment: eddsa-key-20240612", "Public-Lines: 2",
		"AAAAC3NzaC1lZDI1NTE5AAAAIKpGh3DLYyXuF0d6MWvHf7s3uWQ1xw0DHpdtKmbW", "4Zq9", "Private-Lines: 1", priv, "Private-MAC: " + g.from("0123456789abcdef", 64)}, priv)
	s = g.secret("!$*-_.~+@")
	add("netrc", []string{"machine api.example.com login bob password " + s}, s)
	s = g.secret("!$*-_.~+@ ")
	add("pgpass", []string{"db.example.com:5432:app:appuser:" + s}, s)
	s = "ghp_" + g.from(alnum, 36)
	add("git credentials", []string{"https://bob:" + s + "@github.com"}, s)
	auth := base64.StdEncoding.EncodeToString([]byte("bot:" + g.secret("!$*-_.~+")))
	idt := g.from(alnum, 30)
	add("docker auths", []string{`{"auths":{"registry.example.com":{"auth":"` + auth + `","identitytoken":"` + idt + `"}}}`}, auth, idt)
	cfg := base64.StdEncoding.EncodeToString([]byte(`{"auths":{"r.io":{"auth":"` + auth + `"}}}`))
	add("dockerconfigjson", []string{"  .dockerconfigjson: " + cfg}, cfg)
	s = g.secret("_-.+/=@%!")
	ps = append(ps, planting{form: "env list", lines: []string{"- name: " + g.name(), "  value: " + s}, secrets: []string{s}})
	s = g.secret("_-.+/=@%!")
	add("env list json", []string{`{"name":"` + g.name() + `","value":"` + s + `"}`}, s)
	s = g.from(alnum+"./", 86)
	add("crypt hash", []string{"root:$6$" + g.from(alnum, 16) + "$" + s + ":19000:0:99999:7:::"}, s)
	s = g.secret(" !#$%&*()-_=+[]{};:,.<>/?@")
	n = g.name()
	ps = append(ps, planting{form: "systemd environment", lines: []string{`Environment="` + n + "=" + s + `" "REGION=us-east-1"`}, secrets: []string{s}, env: []string{n + "=" + s}})
	s1, s2 = g.secret("_-.+/=@%!"), g.secret("_-.+/=@%!")
	add("cloud-init chpasswd", []string{"chpasswd:", "  list: |", "    root:" + s1, "    ubuntu:" + s2, "  expire: false"}, s1, s2)
	s = g.secret("-._~+/=")
	add("go map", []string{"headers map[Accept:[*/*] Authorization:[Bearer " + s + "]]"}, s)
	lines, body = g.pem("RSA PRIVATE KEY", 64)
	ps = append(ps, planting{form: "pem in the environment", secrets: body, env: []string{"TLS_KEY=" + strings.Join(lines, "\n")}})
	return ps
}

// innocent lines that must come out unchanged.
func innocentEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "HOME=/root", "KUBERNETES_SERVICE_HOST=10.100.0.1",
		"KEYBOARD_LAYOUT=us", "MONKEY=banana", "XDG_SESSION_TYPE=tty", "PWD=/var/lib/kubelet"}
}

func innocentLines() []string {
	return []string{
		"Jun 12 10:00:00 ip-10-0-1-23 kubelet[1034]: I0612 10:00:00.000001 1034 server.go:487] \"Kubelet version\" kubeletVersion=\"v1.37.2\"",
		"Jun 12 10:00:00 ip-10-0-1-23 systemd[1]: kubelet.service: received SIGTERM, stopping",
		"--authorization-mode=Webhook --authentication-token-webhook=true --tls-private-key-file=/var/lib/kubelet/pki/kubelet.key",
		"passwd:         files systemd",
		"  - key: node.kubernetes.io/unreachable",
		"kernel.keys.maxkeys = 200",
	}
}

// filler is an ordinary log line.
func filler(g *gen, i int) string {
	return fmt.Sprintf("Jun 12 10:%02d:%02d ip-10-0-1-23 kubelet[1034]: I0612 10:00:01.%06d 1034 kubelet.go:%d] \"SyncLoop (PLEG): event for pod\" pod=\"kube-system/coredns-%d\"",
		i/60%60, i%60, g.rnd.IntN(1e6), 2000+g.rnd.IntN(500), g.rnd.IntN(1e5))
}

func prefixed(lines []string, proc string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("Jun 12 10:00:%02d ip-10-0-1-23 %s: %s", i%60, proc, l)
	}
	return out
}

// plantRuns is how many hosts TestPlantedSecretsNeverLeave plants; each
// run has its own seed (printed on failure, with -plant-seed to rerun one).
var (
	plantRuns = flag.Int("plant-runs", 12, "hosts TestPlantedSecretsNeverLeave plants")
	plantSeed = flag.Uint64("plant-seed", 20240612, "first seed of TestPlantedSecretsNeverLeave")
)

func TestPlantedSecretsNeverLeave(t *testing.T) {
	runs := *plantRuns
	if testing.Short() {
		runs = min(runs, 3)
	}
	for run := 0; run < runs; run++ {
		seed := *plantSeed + uint64(run)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { plantAndCheck(t, seed) })
	}
}

func plantAndCheck(t *testing.T, seed uint64) {
	g := &gen{rnd: rand.New(rand.NewPCG(seed, 0x5eed))}
	h := diagtest.NewHost(t)
	plants := g.forms()

	// Where each form goes: a tailed log (raw, or as log lines), a config
	// file (collected whole), the journal (whose --lines window may start
	// anywhere), a daemon's environment or command line.
	logs := map[string][][]string{} // each form's lines stay together
	logNames := []string{"var/log/cloud-init-output.log", "var/log/syslog", "var/log/messages"}
	configs := map[string][]string{"etc/default/kubelet": nil, "etc/containerd/config.toml": nil, "var/lib/kubelet/kubeconfig": nil, "etc/systemd/system/kubelet.service.d/20-extra.conf": nil}
	configNames := []string{"etc/default/kubelet", "etc/containerd/config.toml", "var/lib/kubelet/kubeconfig", "etc/systemd/system/kubelet.service.d/20-extra.conf"}
	var journal, envs, argv, gpuOut []string
	var secrets []string
	for _, p := range plants {
		secrets = append(secrets, p.secrets...)
		switch where := g.rnd.IntN(10); {
		case p.env != nil && (p.lines == nil || where < 2):
			envs = append(envs, p.env...)
		case p.argv != nil && where < 4:
			argv = append(argv, p.argv...)
		case p.lines == nil:
			envs = append(envs, p.env...)
		case where < 6:
			f := logNames[g.rnd.IntN(len(logNames))]
			lines := p.lines
			if f != "var/log/cloud-init-output.log" {
				lines = prefixed(lines, "cloud-init[812]")
			}
			logs[f] = append(logs[f], lines)
		case where < 8:
			f := configNames[g.rnd.IntN(len(configNames))]
			configs[f] = append(configs[f], p.lines...)
		case where == 8 && g.rnd.IntN(2) == 0:
			gpuOut = append(gpuOut, p.lines...)
		default:
			journal = append(journal, p.lines...)
		}
	}
	// Logs: filler around the forms, so that a random tail window cuts
	// anywhere, and an overlong line with a secret near the 1 MiB cut.
	var total int64
	for _, f := range logNames {
		var out []string
		forms := logs[f]
		for i := 0; len(forms) > 0 || i < 200; i++ {
			if len(forms) > 0 && g.rnd.IntN(3) == 0 {
				out = append(out, forms[0]...)
				forms = forms[1:]
				continue
			}
			out = append(out, filler(g, i))
		}
		if f == "var/log/messages" {
			long, secret := longLine(g)
			out = append(out, long)
			secrets = append(secrets, secret)
		}
		content := strings.Join(out, "\n") + "\n"
		total += int64(len(content))
		h.Root.WriteFile(f, content)
	}
	for _, f := range configNames {
		h.Root.WriteFile(f, strings.Join(append(append([]string{"# managed"}, configs[f]...), innocentLines()...), "\n")+"\n")
	}
	// The journal window starts at a random line: inside a key block, a
	// YAML block, anywhere.
	// journalctl answers the context query (--until) with the entries
	// before the window.
	if len(journal) > 0 {
		for i, l := range journal {
			journal[i] = fmt.Sprintf("2024-06-12T10:%02d:%02d.%06d+0000 ip-10-0-1-23 kubelet[1034]: %s", i/60%60, i%60, i, l)
		}
		from := g.rnd.IntN(len(journal))
		h.Script.Set("journalctl * --unit=kubelet.service", command.Result{Stdout: strings.Join(journal[from:], "\n") + "\n"})
		h.Script.Set("journalctl * --until=* --unit=kubelet.service", command.Result{Stdout: strings.Join(journal[max(0, from-200):from+1], "\n") + "\n"})
	}
	h.Script.Set("journalctl * --unit=containerd.service", command.Result{Stdout: strings.Join(innocentLines(), "\n") + "\n"})
	// A daemon's environment and command line.
	h.Root.WriteFile("proc/812/environ", strings.Join(append(append([]string{}, innocentEnv()...), envs...), "\x00")+"\x00")
	h.Root.WriteFile("proc/4242/cmdline", strings.Join(append([]string{"/usr/bin/java"}, argv...), "\x00")+"\x00")
	h.Root.AddProcess(hostroot.Process{PID: 812, PPID: 1, Comm: "containerd", State: 'S'})
	// The agent's own config.
	cs := g.secret("!#$%&*-_=+.,:@ ")
	ck := g.from(b64ch, 48)
	h.EffectiveConfig = map[string]any{"monitors": map[string]any{"kernel": map[string]any{"enabled": true}},
		"upload":  map[string]any{"authToken": cs, "endpoint": "https://collector.internal/x", "auth": map[string]any{"user": "bot", "signingKey": ck}},
		"sources": map[string]any{"journal": map[string]any{"command": "journalctl --since=-1h --header 'X-Api-Key: " + cs + "'"}}}
	secrets = append(secrets, cs, ck)

	// A GPU diagnostic's output (a file of the agent's, copied in).
	gpuFile := filepath.Join(t.TempDir(), "gpu-diagnostic.json")
	if err := os.WriteFile(gpuFile, []byte(`{"DCGM Diagnostic": {"test_categories": []}}`+"\n"+strings.Join(gpuOut, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A random tail window, per-file cap and bundle cap.
	e := env(h)
	e.GPUDiagnosticFile = gpuFile
	e.LogTailBytes = 1024 + g.rnd.Int64N(total)
	maxFile := int64(8<<10) + g.rnd.Int64N(4<<20)
	maxBundle := int64(bundle.Reserve) + 64<<10 + g.rnd.Int64N(8<<20)
	var buf bytes.Buffer
	b := bundle.New(&buf, bundle.Options{Root: "b", MaxBytes: maxBundle})
	res, _, err := collect.Run(context.Background(), collectors.For(e, nil), b, collect.Options{SpoolDir: filepath.Join(t.TempDir(), "spool"), MaxFileBytes: maxFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(bundle.Manifest{Collectors: res}); err != nil {
		t.Fatal(err)
	}
	files := diagtest.Untar(t, &buf)
	if os.Getenv("DBGDUMP") != "" {
		for k, v := range files {
			_ = os.MkdirAll(filepath.Dir(filepath.Join(os.Getenv("DBGDUMP"), k)), 0o755)
			_ = os.WriteFile(filepath.Join(os.Getenv("DBGDUMP"), k), []byte(v), 0o644)
		}
		data, _ := os.ReadFile(h.Path("var/log/cloud-init-output.log"))
		_ = os.WriteFile(filepath.Join(os.Getenv("DBGDUMP"), "orig-cloud-init-output.log"), data, 0o644)
	}

	frag := map[string]string{}
	for _, s := range secrets {
		for i := 0; i+8 <= len(s); i++ {
			frag[s[i:i+8]] = s
		}
	}
	for name, content := range files {
		for i := 0; i+8 <= len(content); i++ {
			if s, ok := frag[content[i:i+8]]; ok {
				line := content[strings.LastIndexByte(content[:i], '\n')+1:]
				if k := strings.IndexByte(line, '\n'); k >= 0 {
					line = line[:k]
				}
				t.Fatalf("tail %d, file cap %d, bundle cap %d: %q of secret %q is in %s:\n%.400s", e.LogTailBytes, maxFile, maxBundle, content[i:i+8], s, name, line)
			}
		}
	}
	// The fake host's own planted secrets are words, not random: they are
	// looked for whole.
	for name, content := range files {
		for _, s := range h.Secrets {
			if strings.Contains(content, s) {
				t.Fatalf("planted secret %q is in %s", s, name)
			}
		}
	}
	// Nothing innocent lost (where no cap cut the file).
	for path, want := range map[string][]string{
		"system/environ/containerd-812.env":                          innocentEnv(),
		"runtime/etc/default/kubelet":                                innocentLines(),
		"system/journal/containerd.log":                              innocentLines(),
		"runtime/var/lib/kubelet/kubeconfig":                         innocentLines(),
		"runtime/etc/containerd/config.toml":                         innocentLines(),
		"nodemend/effective-config.yaml":                             {"endpoint: https://collector.internal/x", "user: bot"},
		"system/processes.txt":                                       {"/usr/bin/java"},
		"system/environ/kubelet-1034.env":                            {"AWS_REGION=us-east-1"},
		"accelerators/nvidia/dcgm-diagnostic.json":                   {`{"DCGM Diagnostic": {"test_categories": []}}`},
		"runtime/etc/systemd/system/kubelet.service.d/20-extra.conf": innocentLines(),
	} {
		content, ok := files[path]
		if !ok {
			if !strings.Contains(files[bundle.ManifestName], "left out") {
				t.Errorf("%s is not in the bundle", path)
			}
			continue
		}
		if int64(len(content)) >= maxFile-1024 || strings.Contains(content, "the bundle reached its size cap") {
			continue // cut by a cap
		}
		for _, l := range want {
			if !strings.Contains(content, l) {
				t.Errorf("%s lost the innocent line %q:\n%s", path, l, content)
			}
		}
	}
}

// longLine is a single-line JSON dump longer than the redactor's 1 MiB
// piece, with a secret at a random place around the cut.
func longLine(g *gen) (string, string) {
	secret := g.secret("!#$%&*-_=+.,:@")
	var b strings.Builder
	b.WriteString(`{"items":[`)
	at := (1 << 20) - 6000 + g.rnd.IntN(12000)
	for b.Len() < at {
		fmt.Fprintf(&b, `{"name":"pod-%d","phase":"Running"},`, g.rnd.IntN(1e6))
	}
	q, _ := json.Marshal(secret)
	fmt.Fprintf(&b, `{"name":"db","password":%s},`, q)
	for b.Len() < at+300<<10 {
		fmt.Fprintf(&b, `{"name":"pod-%d","phase":"Running"},`, g.rnd.IntN(1e6))
	}
	b.WriteString(`{}]}`)
	return b.String(), secret
}
