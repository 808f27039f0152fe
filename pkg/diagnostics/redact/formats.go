package redact

import (
	"bytes"
	"encoding/base64"
	"regexp"
)

// format is a secret recognised by its own shape, whatever name it has:
// a literal prefix (matched case-sensitively at a word start) and the body
// that must follow it. The whole token is masked, prefix included: a kept
// prefix is an 8-character fragment of the secret.
type format struct {
	name   string
	prefix string
	body   *regexp.Regexp // anchored, matched right after the prefix
	// back: the token starts this many bytes before the literal (a literal
	// inside the token, as Azure's "Q~"); head is what those bytes match.
	back int
	head *regexp.Regexp
}

// maxFormatLen bounds how far a format's body is looked for.
const maxFormatLen = 1024

// formats lists the token formats. Every entry has its own case in the
// tests (and a test removes each in turn).
func formats() []format {
	f := func(name, prefix, body string) format {
		return format{name: name, prefix: prefix, body: regexp.MustCompile(`^(?:` + body + `)`)}
	}
	// inside is a format whose literal is inside the token: back bytes
	// matching head before it, body after it.
	inside := func(name, lit string, back int, head, body string) format {
		return format{name: name, prefix: lit, back: back, head: regexp.MustCompile(`^(?:` + head + `)$`), body: regexp.MustCompile(`^(?:` + body + `)`)}
	}
	aws := `[A-Z0-9]{16}\b`
	gh := `[A-Za-z0-9]{36}\b`
	gl := `[A-Za-z0-9_.-]{20,}`
	slack := `[A-Za-z0-9-]{10,}`
	stripe := `[A-Za-z0-9]{16,}`
	crypt := `[./A-Za-z0-9$=,+-]{8,}`
	return []format{
		// AWS access key ids (long-term, temporary, and the other key kinds).
		f("aws-access-key-id", "AKIA", aws), f("aws-temporary-key-id", "ASIA", aws),
		f("aws-bearer-key-id", "ABIA", aws), f("aws-context-key-id", "ACCA", aws),
		f("aws-key-id", "A3T", `[A-Z0-9]{17}\b`),
		// GitHub.
		f("github-pat", "ghp_", gh), f("github-oauth", "gho_", gh), f("github-user-to-server", "ghu_", gh),
		f("github-server-to-server", "ghs_", gh), f("github-refresh", "ghr_", gh),
		f("github-fine-grained-pat", "github_pat_", `[A-Za-z0-9_]{22,}`),
		// GitLab.
		f("gitlab-pat", "glpat-", gl), f("gitlab-deploy", "gldt-", gl), f("gitlab-runner", "glrt-", gl),
		f("gitlab-pipeline-trigger", "glptt-", gl), f("gitlab-ci-job", "glcbt-", gl), f("gitlab-incoming-mail", "glimt-", gl),
		f("gitlab-agent", "glagent-", gl), f("gitlab-scim", "glsoat-", gl), f("gitlab-feed", "glft-", gl),
		f("gitlab-runner-registration", "GR1348941", `[A-Za-z0-9_-]{20,}`),
		// Slack tokens and webhooks.
		f("slack-bot", "xoxb-", slack), f("slack-user", "xoxp-", slack), f("slack-app", "xoxa-", slack),
		f("slack-refresh", "xoxr-", slack), f("slack-session", "xoxs-", slack), f("slack-config", "xoxe-", slack),
		f("slack-app-level", "xapp-", slack),
		f("slack-webhook", "hooks.slack.com/services/", `[A-Za-z0-9/_-]{20,}`),
		// Stripe.
		f("stripe-secret", "sk_live_", stripe), f("stripe-test-secret", "sk_test_", stripe),
		f("stripe-restricted", "rk_live_", stripe), f("stripe-test-restricted", "rk_test_", stripe),
		f("stripe-webhook-secret", "whsec_", stripe),
		// Google.
		f("google-api-key", "AIza", `[0-9A-Za-z_-]{35}`), f("google-oauth-access", "ya29.", `[0-9A-Za-z_-]{20,}`),
		f("google-oauth-client-secret", "GOCSPX-", `[A-Za-z0-9_-]{20,}`),
		// Package registries, vaults, clouds, AI APIs.
		f("npm", "npm_", `[A-Za-z0-9]{36}`), f("pypi", "pypi-AgEIcHlwaS5vcmc", `[A-Za-z0-9_-]{20,}`),
		f("docker-hub-pat", "dckr_pat_", `[A-Za-z0-9_-]{20,}`),
		f("vault-service", "hvs.", `[A-Za-z0-9_-]{20,}`), f("vault-batch", "hvb.", `[A-Za-z0-9_-]{20,}`),
		f("vault-recovery", "hvr.", `[A-Za-z0-9_-]{20,}`),
		f("digitalocean-pat", "dop_v1_", `[a-f0-9]{64}`), f("digitalocean-oauth", "doo_v1_", `[a-f0-9]{64}`),
		f("digitalocean-refresh", "dor_v1_", `[a-f0-9]{64}`),
		f("anthropic", "sk-ant-", `[A-Za-z0-9_-]{20,}`), f("openai-project", "sk-proj-", `[A-Za-z0-9_-]{20,}`),
		f("huggingface", "hf_", `[A-Za-z]{30,}`),
		f("shopify-access", "shpat_", `[a-fA-F0-9]{32}`), f("shopify-shared-secret", "shpss_", `[a-fA-F0-9]{32}`),
		f("sendgrid", "SG.", `[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}`),
		f("age-secret-key", "AGE-SECRET-KEY-1", `[A-Z0-9]{58}`),
		f("grafana-service-account", "glsa_", `[A-Za-z0-9_]{32,}`), f("grafana-cloud", "glc_", `[A-Za-z0-9+/=_-]{32,}`),
		f("newrelic-user", "NRAK-", `[A-Z0-9]{27}`), f("databricks", "dapi", `[a-f0-9]{32}\b`),
		f("twilio-api-key", "SK", `[0-9a-f]{32}\b`), f("mailgun", "key-", `[0-9a-f]{32}\b`),
		f("atlassian", "ATATT3", `[A-Za-z0-9_=-]{50,}`),
		f("tailscale", "tskey-", `[A-Za-z0-9-]{20,}`), f("docker-swarm-join", "SWMTKN-1-", `[a-z0-9-]{40,}`),
		f("sentry-org", "sntrys_", `[A-Za-z0-9_=+/]{40,}`), f("sentry-user", "sntryu_", `[a-f0-9]{40,}`),
		inside("azure-client-secret", "Q~", 4, `[A-Za-z0-9_~.-]{3}[0-9]`, `[A-Za-z0-9_~.-]{31,34}`),
		inside("terraform-cloud", ".atlasv1.", 14, `[A-Za-z0-9]{14}`, `[A-Za-z0-9_=-]{60,}`),
		f("pulumi", "pul-", `[a-f0-9]{40}`), f("linear", "lin_api_", `[A-Za-z0-9]{40}`),
		// JWTs and JWEs (also a lone header or payload: base64 of a JSON
		// object, as in a .dockerconfigjson).
		f("jwt", "eyJ", `[A-Za-z0-9_+/=-]{13,}(?:\.[A-Za-z0-9_+/=-]*)*`),
		// Password hashes (crypt(3), htpasswd): offline-crackable.
		f("crypt-md5", "$1$", crypt), f("crypt-bcrypt-2a", "$2a$", crypt), f("crypt-bcrypt-2b", "$2b$", crypt),
		f("crypt-bcrypt-2y", "$2y$", crypt), f("crypt-sha256", "$5$", crypt), f("crypt-sha512", "$6$", crypt),
		f("crypt-yescrypt", "$y$", crypt), f("crypt-gost-yescrypt", "$gy$", crypt), f("crypt-scrypt", "$7$", crypt),
		f("crypt-apr1", "$apr1$", crypt), f("argon2id", "$argon2id$", crypt), f("argon2i", "$argon2i$", crypt),
	}
}

// match returns the start and end of the token whose literal is at
// line[i:], or -1.
func (f *format) match(line []byte, i int) (int, int) {
	if !bytes.HasPrefix(line[i:], []byte(f.prefix)) {
		return -1, -1
	}
	if f.back > 0 {
		s := i - f.back
		if s < 0 || (s > 0 && classOf(line[s-1]) != clsOther) || !f.head.Match(line[s:i]) {
			return -1, -1
		}
		p := i + len(f.prefix)
		m := f.body.FindIndex(line[p:min(len(line), p+maxFormatLen)])
		if m == nil {
			return -1, -1
		}
		return s, p + m[1]
	}
	if i > 0 && classOf(line[i-1]) != clsOther && f.prefix[0] != '$' && f.prefix != "hooks.slack.com/services/" {
		return -1, -1 // inside a longer word
	}
	p := i + len(f.prefix)
	m := f.body.FindIndex(line[p:min(len(line), p+maxFormatLen)])
	if m == nil {
		return -1, -1
	}
	return i, p + m[1]
}

// authSchemes are HTTP authorization schemes whose credential follows them
// ("Bearer x", "Basic dXNlcjpwYXNz") anywhere in a line.
func authSchemes() []string { return []string{"bearer", "basic"} }

// authCredential masks the credential after a scheme word at i.
func (c *lineCtx) authCredential(i, n int) {
	line := c.line
	if i > 0 && classOf(line[i-1]) != clsOther {
		return
	}
	p := i + n
	sep := p
	for p < len(line) && (line[p] == ' ' || line[p] == '\t') {
		p++
	}
	switch {
	case p > sep:
	case bytes.HasPrefix(line[p:], []byte("%20")):
		p += 3
	case p < len(line) && line[p] == '+':
		p++
	default:
		return
	}
	e := p
	for e < len(line) && (classOf(line[e]) != clsOther || bytes.IndexByte([]byte("-._~+/="), line[e]) >= 0) {
		e++
	}
	cred := line[p:e]
	if len(cred) < 6 || !credentialLike(cred, string(bytes.ToLower(line[i:i+n])) == "basic") {
		return
	}
	c.add(p, e, false)
}

// credentialLike tells a credential from an English word after "Bearer" or
// "Basic" ("basic authentication", "bearer token").
func credentialLike(cred []byte, basic bool) bool {
	if basic && len(cred) <= 512 {
		var dec [384]byte
		if n, err := base64.StdEncoding.Decode(dec[:], cred); err == nil && bytes.IndexByte(dec[:n], ':') >= 0 {
			return true
		}
	}
	for _, b := range cred {
		if classOf(b) == clsDigit || classOf(b) == clsUpper || bytes.IndexByte([]byte("-._~+/="), b) >= 0 {
			return true
		}
	}
	return len(cred) > 16 // a long lower-case run is no word either
}

// maxAuthority bounds how far a URL's userinfo is looked for.
const maxAuthority = 2048

// userinfo masks the password of a URL ("scheme://user:password@host"),
// also with an empty user and with '@' inside the password (the userinfo
// ends at the authority's last '@'), and a user part that is a token
// ("https://ghp_...@github.com"). It returns where what it looked at ends.
func (c *lineCtx) userinfo(i int) int {
	line := c.line
	p := i + 3
	end := p
	for end < len(line) && end-p < maxAuthority && !isSpace(line[end]) && line[end] != '"' && line[end] != '\'' && line[end] != '<' && line[end] != '>' && line[end] != '\\' {
		end++
	}
	auth := line[p:end]
	at := bytes.LastIndexByte(auth, '@')
	if at < 0 {
		return end
	}
	ui := auth[:at]
	// The authority ends at the first '/', '?' or '#'; one after a ':' may
	// be in an unencoded password, and is taken for one (fail closed: a
	// "host:443/path/@x" loses its "443/path/").
	colon := bytes.IndexByte(ui, ':')
	if slash := bytes.IndexAny(ui, "/?#"); slash >= 0 && (colon < 0 || slash < colon) {
		return p + slash // the '@' is in the path: "https://host/@scope/pkg"
	}
	if colon < 0 {
		if len(ui) >= 16 {
			c.add(p, p+at, false) // a token as the user name
		}
		return p + at
	}
	if colon+1 < at {
		c.add(p+colon+1, p+at, false)
	}
	return p + at
}

// dsnAt masks the password of a Go MySQL DSN ("user:password@tcp(host)/db")
// and of an Oracle thin connect string ("thin:user/password@host") ending
// at the '@' at i.
func (c *lineCtx) dsnAt(i int) {
	line := c.line
	s := i
	for s > c.done[doneDSN] && i-s < 512 && !isSpace(line[s-1]) && line[s-1] != '"' && line[s-1] != '\'' && line[s-1] != '=' {
		s--
	}
	tok := line[s:i]
	if t := bytes.LastIndex(tok, []byte("thin:")); t >= 0 {
		if sl := bytes.IndexByte(tok[t:], '/'); sl >= 0 && t+sl+1 < len(tok) {
			c.add(s+t+sl+1, i, false)
		}
		return
	}
	if k := bytes.Index(tok, []byte("://")); k >= 0 {
		// "scheme://x@tcp(": x is a password (a user would have a ':'
		// before it, which the URL rule masks after).
		if ui := tok[k+3:]; bytes.IndexByte(ui, ':') < 0 {
			c.add(s+k+3, i, false)
		}
		return
	}
	if colon := bytes.IndexByte(tok, ':'); colon >= 0 && colon+1 < len(tok) {
		c.add(s+colon+1, i, false)
	}
}

// dsnMarkers end the password of a connection string without "://".
func dsnMarkers() []string { return []string{"@tcp(", "@unix(", "@udp(", "@//"} }

// cmdForm is how a command-line flag carries a password.
type cmdForm uint8

const (
	// formUserPass: "-u user:password" / "--user=user:password".
	formUserPass cmdForm = iota
	// formAttached: "-pPASSWORD" (mysql and friends).
	formAttached
	// formNext: the next argument ("sshpass -p PASSWORD").
	formNext
	// formUserPercent: "-U user%password" (smbclient).
	formUserPercent
)

// cmdFlag is a command-line form that carries a password without a telling
// name. tool, when set, must appear earlier on the line.
type cmdFlag struct {
	flag string
	tool string
	form cmdForm
}

func cmdFlags() []cmdFlag {
	return []cmdFlag{
		{flag: "-u", form: formUserPass}, // curl, wget -u
		{flag: "--user", form: formUserPass},
		{flag: "--proxy-user", form: formUserPass},
		{flag: "-p", form: formAttached},
		{flag: "-p", tool: "sshpass", form: formNext},
		{flag: "-p", tool: "login", form: formNext}, // docker/podman/nerdctl login
		{flag: "-p", tool: "mysql", form: formAttached},
		{flag: "-a", tool: "redis-cli", form: formNext},
		{flag: "-w", tool: "ldap", form: formNext}, // ldapsearch, ldapmodify, ...
		{flag: "-U", tool: "smbclient", form: formUserPercent},
	}
}

// cmdValue masks what a command-line form carries; the flag is at i.
func (c *lineCtx) cmdValue(f *cmdFlag, i int) {
	line := c.line
	if i > 0 && !isSpace(line[i-1]) && line[i-1] != '"' && line[i-1] != '\'' {
		return
	}
	if f.tool != "" && !c.toolBefore(f.tool, i) {
		return
	}
	var encl byte
	if i > 0 && (line[i-1] == '"' || line[i-1] == '\'') {
		encl = line[i-1]
	}
	p := i + len(f.flag)
	if bytes.Contains(argAt(line, p, encl), []byte(Mask)) {
		return // masked already ("-pw=[REDACTED]")
	}
	switch f.form {
	case formAttached:
		v := argAt(line, p, encl)
		if len(v) == 0 || (f.tool == "" && !attachedPassword(v)) {
			return
		}
		c.add(p, p+len(v), false)
	default:
		switch {
		case p < len(line) && line[p] == '=':
			p++
		case p < len(line) && isSpace(line[p]):
			for p < len(line) && isSpace(line[p]) {
				p++
			}
		case p < len(line) && encl != 0 && line[p] == encl:
			// ["-u", "user:pw"]: the value is the list's next element.
			q, ok := listElement(line, p+1)
			if !ok {
				return
			}
			p, encl = q+1, line[q]
		default:
			return
		}
		v := argAt(line, p, encl)
		if len(v) == 0 || v[0] == '-' || bytes.Contains(v, []byte(Mask)) {
			return
		}
		switch f.form {
		case formNext:
			c.add(p, p+len(v), false)
		case formUserPass, formUserPercent:
			sep := byte(':')
			if f.form == formUserPercent {
				sep = '%'
			}
			k := bytes.IndexByte(v, sep)
			if k < 0 || k+1 == len(v) || (allDigits(v[:k]) && allDigits(v[k+1:])) {
				return // "-u root", "-u 1000:1000" (docker run)
			}
			c.add(p+k+1, p+len(v), false)
		}
	}
}

// argAt returns the command-line argument at p: up to whitespace, with
// quoted parts and what a shell joins to them ("s3"cr'et' is one word).
// encl is the quote of a string the argument stands in ("-psecret" in a
// JSON array), or 0: that quote ends the argument.
func argAt(line []byte, p int, encl byte) []byte {
	e := p
	for e < len(line) && !isSpace(line[e]) {
		q := line[e]
		if q != '"' && q != '\'' {
			e++
			continue
		}
		if q == encl {
			break
		}
		end := bytes.IndexByte(line[e+1:], q)
		if end < 0 {
			return line[p:]
		}
		e += end + 2
		if e < len(line) && !joinsWord(line[e]) {
			break
		}
	}
	return line[p:e]
}

// listElement returns where the next element of a JSON or YAML flow list
// starts after position p, which closes a flag's element: the value of
// `"--password", "x"` is the next element.
func listElement(line []byte, p int) (int, bool) {
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if p >= len(line) || line[p] != ',' {
		return 0, false
	}
	p++
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	return p, p < len(line) && (line[p] == '"' || line[p] == '\'')
}

// joinsWord reports a byte after a closing quote that a shell would make
// part of the same word; punctuation of a list or object around the
// argument does not.
func joinsWord(b byte) bool {
	return !isSpace(b) && !bytes.ContainsRune([]byte(`,;)]}>|&<`), rune(b))
}

// attachedPassword tells "-pS3cret" from "-pv" (short flags together), a
// port ("-p8080", "-p8080:80") and similar.
func attachedPassword(v []byte) bool {
	if len(v) < 4 || isPortMapping(v) {
		return false
	}
	for _, b := range v {
		if classOf(b) == clsDigit || classOf(b) == clsUpper || classOf(b) == clsOther {
			return true
		}
	}
	return false
}

func isPortMapping(v []byte) bool {
	for _, b := range v {
		if !('0' <= b && b <= '9') && b != ':' && b != '.' && b != '/' && b != '-' && b != 't' && b != 'c' && b != 'p' && b != 'u' && b != 'd' {
			return false
		}
	}
	return classOf(v[0]) == clsDigit
}

func allDigits(v []byte) bool {
	for _, b := range v {
		if b < '0' || b > '9' {
			return false
		}
	}
	return len(v) > 0
}
