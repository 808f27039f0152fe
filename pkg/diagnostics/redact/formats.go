package redact

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
)

// format is a secret recognised by its own shape, whatever name it has:
// a literal prefix (matched case-sensitively at a word start) and the body
// that must follow it. The whole token is masked, prefix included: a kept
// prefix is an 8-character fragment of the secret.
//
// Most formats are a vendor's prefix and a body of at least min bytes of
// one alphabet (the run of them is masked, however long: vendors lengthen
// their tokens). They are known by prefix and length alone — never by how
// random the body looks: a test token, a placeholder-looking body
// ("gho_" and 36 times "a") or a leaked one of low entropy is still a
// credential of that vendor's shape.
type format struct {
	name   string
	prefix string
	body   *regexp.Regexp // anchored, matched right after the prefix
	// alphabet and min describe a body of at least min bytes of alphabet (a
	// regexp character class without brackets), for formats known by their
	// prefix and length; empty for formats with a structure of their own.
	alphabet string
	min      int
	// back: the token starts this many bytes before the literal (a literal
	// inside the token, as Azure's "Q~"); head is what those bytes match.
	back int
	head *regexp.Regexp
}

// maxFormatLen bounds how far a format's body is looked for.
const maxFormatLen = 1024

// formats lists the token formats. Every entry has its own case in the
// tests (and a test removes each in turn); every prefix-and-length entry
// is also tested at exactly its minimum length and one byte short of it.
func formats() []format {
	// tok is a token of a vendor's prefix and a body of at least min bytes
	// of alphabet.
	tok := func(name, prefix, alphabet string, min int) format {
		return format{name: name, prefix: prefix, alphabet: alphabet, min: min,
			body: regexp.MustCompile(fmt.Sprintf(`^(?:[%s]{%d,})`, alphabet, min))}
	}
	f := func(name, prefix, body string) format {
		return format{name: name, prefix: prefix, body: regexp.MustCompile(`^(?:` + body + `)`)}
	}
	// inside is a format whose literal is inside the token: back bytes
	// matching head before it, body after it.
	inside := func(name, lit string, back int, head, body string) format {
		return format{name: name, prefix: lit, back: back, head: regexp.MustCompile(`^(?:` + head + `)$`), body: regexp.MustCompile(`^(?:` + body + `)`)}
	}
	const (
		upperDigits = `A-Z0-9`
		alnum       = `A-Za-z0-9`
		word        = `A-Za-z0-9_`
		dashed      = `A-Za-z0-9_-`
		hex         = `a-f0-9`
		crypt       = `./A-Za-z0-9$=,+-`
	)
	return []format{
		// AWS access key ids (long-term, temporary, and the other key kinds).
		tok("aws-access-key-id", "AKIA", upperDigits, 16), tok("aws-temporary-key-id", "ASIA", upperDigits, 16),
		tok("aws-bearer-key-id", "ABIA", upperDigits, 16), tok("aws-context-key-id", "ACCA", upperDigits, 16),
		tok("aws-key-id", "A3T", upperDigits, 17),
		// GitHub (its own scanning pattern: gh[pousr]_[A-Za-z0-9_]{36,255}).
		tok("github-pat", "ghp_", word, 36), tok("github-oauth", "gho_", word, 36), tok("github-user-to-server", "ghu_", word, 36),
		tok("github-server-to-server", "ghs_", word, 36), tok("github-refresh", "ghr_", word, 36),
		tok("github-fine-grained-pat", "github_pat_", word, 22),
		// GitLab.
		tok("gitlab-pat", "glpat-", `A-Za-z0-9_.-`, 20), tok("gitlab-deploy", "gldt-", `A-Za-z0-9_.-`, 20),
		tok("gitlab-runner", "glrt-", `A-Za-z0-9_.-`, 20), tok("gitlab-pipeline-trigger", "glptt-", `A-Za-z0-9_.-`, 20),
		tok("gitlab-ci-job", "glcbt-", `A-Za-z0-9_.-`, 20), tok("gitlab-incoming-mail", "glimt-", `A-Za-z0-9_.-`, 20),
		tok("gitlab-agent", "glagent-", `A-Za-z0-9_.-`, 20), tok("gitlab-scim", "glsoat-", `A-Za-z0-9_.-`, 20),
		tok("gitlab-feed", "glft-", `A-Za-z0-9_.-`, 20), tok("gitlab-runner-registration", "GR1348941", dashed, 20),
		// Slack tokens and webhooks.
		tok("slack-bot", "xoxb-", `A-Za-z0-9-`, 10), tok("slack-user", "xoxp-", `A-Za-z0-9-`, 10),
		tok("slack-app", "xoxa-", `A-Za-z0-9-`, 10), tok("slack-refresh", "xoxr-", `A-Za-z0-9-`, 10),
		tok("slack-session", "xoxs-", `A-Za-z0-9-`, 10), tok("slack-config", "xoxe-", `A-Za-z0-9-`, 10),
		tok("slack-app-level", "xapp-", `A-Za-z0-9-`, 10),
		tok("slack-webhook", "hooks.slack.com/services/", `A-Za-z0-9/_-`, 20),
		// Stripe.
		tok("stripe-secret", "sk_live_", alnum, 16), tok("stripe-test-secret", "sk_test_", alnum, 16),
		tok("stripe-restricted", "rk_live_", alnum, 16), tok("stripe-test-restricted", "rk_test_", alnum, 16),
		tok("stripe-webhook-secret", "whsec_", alnum, 16),
		// Google.
		tok("google-api-key", "AIza", dashed, 35), tok("google-oauth-access", "ya29.", dashed, 20),
		tok("google-oauth-client-secret", "GOCSPX-", dashed, 20),
		// Package registries, vaults, clouds, AI APIs.
		tok("npm", "npm_", alnum, 36), tok("pypi", "pypi-AgEIcHlwaS5vcmc", dashed, 20),
		tok("docker-hub-pat", "dckr_pat_", dashed, 20),
		tok("vault-service", "hvs.", dashed, 20), tok("vault-batch", "hvb.", dashed, 20),
		tok("vault-recovery", "hvr.", dashed, 20),
		tok("digitalocean-pat", "dop_v1_", hex, 64), tok("digitalocean-oauth", "doo_v1_", hex, 64),
		tok("digitalocean-refresh", "dor_v1_", hex, 64),
		tok("anthropic", "sk-ant-", dashed, 20), tok("openai-project", "sk-proj-", dashed, 20),
		tok("huggingface", "hf_", `A-Za-z`, 30),
		tok("shopify-access", "shpat_", `a-fA-F0-9`, 32), tok("shopify-shared-secret", "shpss_", `a-fA-F0-9`, 32),
		f("sendgrid", "SG.", `[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}`),
		tok("age-secret-key", "AGE-SECRET-KEY-1", upperDigits, 58),
		tok("grafana-service-account", "glsa_", word, 32), tok("grafana-cloud", "glc_", `A-Za-z0-9+/=_-`, 32),
		tok("newrelic-user", "NRAK-", upperDigits, 27), tok("databricks", "dapi", hex, 32),
		tok("twilio-api-key", "SK", hex, 32), tok("mailgun", "key-", hex, 32),
		tok("atlassian", "ATATT3", `A-Za-z0-9_=-`, 50),
		tok("tailscale", "tskey-", `A-Za-z0-9-`, 20), tok("docker-swarm-join", "SWMTKN-1-", `a-z0-9-`, 40),
		tok("sentry-org", "sntrys_", `A-Za-z0-9_=+/`, 40), tok("sentry-user", "sntryu_", hex, 40),
		inside("azure-client-secret", "Q~", 4, `[A-Za-z0-9_~.-]{3}[0-9]`, `[A-Za-z0-9_~.-]{31,34}`),
		inside("terraform-cloud", ".atlasv1.", 14, `[A-Za-z0-9]{14}`, `[A-Za-z0-9_=-]{60,}`),
		tok("pulumi", "pul-", hex, 40), tok("linear", "lin_api_", alnum, 40),
		// JWTs and JWEs (also a lone header or payload: base64 of a JSON
		// object, as in a .dockerconfigjson).
		f("jwt", "eyJ", `[A-Za-z0-9_+/=-]{13,}(?:\.[A-Za-z0-9_+/=-]*)*`),
		// Password hashes (crypt(3), htpasswd): offline-crackable.
		tok("crypt-md5", "$1$", crypt, 8), tok("crypt-bcrypt-2a", "$2a$", crypt, 8), tok("crypt-bcrypt-2b", "$2b$", crypt, 8),
		tok("crypt-bcrypt-2y", "$2y$", crypt, 8), tok("crypt-sha256", "$5$", crypt, 8), tok("crypt-sha512", "$6$", crypt, 8),
		tok("crypt-yescrypt", "$y$", crypt, 8), tok("crypt-gost-yescrypt", "$gy$", crypt, 8), tok("crypt-scrypt", "$7$", crypt, 8),
		tok("crypt-apr1", "$apr1$", crypt, 8), tok("argon2id", "$argon2id$", crypt, 8), tok("argon2i", "$argon2i$", crypt, 8),
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
