// Package redact removes secrets from text before it leaves the node: bearer
// and basic credentials, JWTs (service-account tokens), PEM private keys (also
// base64-encoded, as in kubeconfig client-key-data), values of keys and
// environment variables whose names look secret (*KEY*, *TOKEN*, *SECRET*,
// *PASSWORD*, ...), passwords in URLs and well-known token formats.
//
// It works line by line on a stream, with a cheap literal prefilter: a line
// without any trigger word is copied untouched, so multi-hundred-megabyte
// logs cost one table lookup per byte. It errs on the side of removing too
// much: a bundle with a redacted log field is still useful, one with a
// leaked key is an incident.
package redact

import (
	"bytes"
	"encoding/base64"
	"regexp"
)

// Mask replaces every secret.
const Mask = "[REDACTED]"

// rule identifies what a trigger word starts.
type rule uint8

const (
	ruleName   rule = iota // a secret-looking key or variable name
	ruleAuth               // "bearer xxx" / "basic xxx"
	ruleJWT                // eyJ...eyJ...
	rulePEM                // -----BEGIN ... PRIVATE KEY-----
	ruleB64PEM             // base64 of a PEM block
	ruleURL                // scheme://user:password@host
	ruleToken              // well-known token formats (AWS, GitHub, Slack, Google)
)

type trigger struct {
	lit  string // lower case
	rule rule
}

// triggers are matched case-insensitively. Name keywords are what makes a
// key or variable name secret; the rest start a pattern checked by regexp.
func triggers() []trigger {
	return []trigger{
		{"key", ruleName}, {"token", ruleName}, {"secret", ruleName}, {"passw", ruleName},
		{"pwd", ruleName}, {"credential", ruleName}, {"private", ruleName}, {"signature", ruleName},
		{"cookie", ruleName}, {"authorization", ruleName}, {"sig", ruleName}, {"auth", ruleName},
		{"bearer", ruleAuth}, {"basic", ruleAuth},
		{"eyj", ruleJWT},
		{"-----begin", rulePEM},
		{"ls0tls1crudjti", ruleB64PEM}, // base64("-----BEGIN")
		{"://", ruleURL},
		{"akia", ruleToken}, {"asia", ruleToken}, {"ghp_", ruleToken}, {"gho_", ruleToken}, {"ghs_", ruleToken},
		{"ghu_", ruleToken}, {"github_pat_", ruleToken}, {"xox", ruleToken}, {"aiza", ruleToken},
	}
}

// Redactor rewrites lines. It is immutable and safe for concurrent use; the
// per-stream state lives in State.
type Redactor struct {
	// pair maps the first two lower-cased bytes of a trigger to a bit set of
	// trigger indexes: the prefilter.
	pair     [256 * 256]uint32
	lower    [256]byte
	triggers []trigger

	auth, jwt, url, token *regexp.Regexp
}

// New builds a Redactor.
func New() *Redactor {
	r := &Redactor{
		auth:  regexp.MustCompile(`(?i)\b(bearer|basic)(\s+|%20|\+)([A-Za-z0-9\-._~+/]{6,}=*)`),
		jwt:   regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`),
		url:   regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@"'<>]+):([^\s@"'<>]+)@`),
		token: regexp.MustCompile(`\b((?:AKIA|ASIA)[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})`),
	}
	for i := range r.lower {
		b := byte(i)
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		r.lower[i] = b
	}
	r.triggers = triggers()
	for i, t := range r.triggers {
		r.pair[int(t.lit[0])<<8|int(t.lit[1])] |= 1 << i
	}
	return r
}

// State carries what a line leaves open for the next ones: a PEM private key
// block, a YAML block scalar under a secret key, or an env var list entry
// whose name was secret and whose value is on the next line.
type State struct {
	inPEM      int  // lines left to mask until "-----END" (0: not in a block)
	blockOn    bool // in a YAML block scalar under a secret key ...
	blockDepth int  // ... whose key is indented this much
	envValue   bool // the previous line was "name: <SECRET NAME>"
}

// pemMaxLines bounds a PEM block: a block whose END marker never comes (a
// truncated log) must not swallow the rest of the file.
const pemMaxLines = 200

type span struct{ from, to int }

// Line appends the redacted line (without its newline) to dst and returns it
// with the number of secrets masked.
func (r *Redactor) Line(dst, line []byte, st *State) ([]byte, int) {
	if st.inPEM > 0 {
		st.inPEM--
		if i := bytes.Index(line, []byte("-----END")); i >= 0 {
			st.inPEM = 0
			return append(append(dst, Mask...), line[i:]...), 1
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return append(dst, line...), 0
		}
		return append(dst, Mask...), 1
	}
	if st.blockOn {
		if indent(line) > st.blockDepth || len(bytes.TrimSpace(line)) == 0 {
			if len(bytes.TrimSpace(line)) == 0 {
				return append(dst, line...), 0
			}
			return append(append(dst, line[:indent(line)]...), Mask...), 1
		}
		st.blockOn = false
	}
	envValue := st.envValue
	st.envValue = false

	var spans []span
	var hits uint32
	// nameDone is where the last name (and its value) ended: a name is
	// looked at once, however many keywords it contains, which keeps long
	// lines linear.
	nameDone := 0
	for i := 0; i+1 < len(line); i++ {
		m := r.pair[int(r.lower[line[i]])<<8|int(r.lower[line[i+1]])]
		if m == 0 {
			continue
		}
		for m != 0 {
			ti := trailingZeros(m)
			m &^= 1 << ti
			t := r.triggers[ti]
			if !r.hasPrefixFold(line[i:], t.lit) {
				continue
			}
			hits |= 1 << t.rule
			if t.rule == ruleName && i >= nameDone {
				sp, ok, end := r.nameValue(line, i, len(t.lit), st)
				nameDone = end
				if ok {
					spans = append(spans, sp)
					if sp.from >= end && sp.from-end <= 8 {
						// The value right after the name is masked whole.
						nameDone = max(nameDone, sp.to)
					}
				}
			}
		}
	}
	if envValue {
		if sp, ok := envValueLine(line, 0, len(line)); ok {
			spans = append(spans, sp)
		}
	}
	if hits == 0 && len(spans) == 0 {
		return append(dst, line...), 0
	}
	if hits&(1<<ruleAuth) != 0 {
		for _, m := range r.auth.FindAllSubmatchIndex(line, -1) {
			spans = append(spans, span{m[6], m[7]})
		}
	}
	if hits&(1<<ruleJWT) != 0 {
		for _, m := range r.jwt.FindAllIndex(line, -1) {
			spans = append(spans, span{m[0], m[1]})
		}
	}
	if hits&(1<<ruleURL) != 0 && bytes.IndexByte(line, '@') >= 0 {
		for _, m := range r.url.FindAllSubmatchIndex(line, -1) {
			spans = append(spans, span{m[4], m[5]})
		}
	}
	if hits&(1<<ruleToken) != 0 {
		for _, m := range r.token.FindAllIndex(line, -1) {
			spans = append(spans, span{m[0], m[1]})
		}
	}
	if hits&(1<<ruleB64PEM) != 0 {
		spans = append(spans, base64PEM(line)...)
	}
	if hits&(1<<rulePEM) != 0 {
		sp, open := pemSpan(line)
		if sp.to > sp.from {
			spans = append(spans, sp)
		}
		if open {
			st.inPEM = pemMaxLines
		}
	}
	return apply(dst, line, spans)
}

func (r *Redactor) hasPrefixFold(s []byte, lit string) bool {
	if len(s) < len(lit) {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if r.lower[s[i]] != lit[i] {
			return false
		}
	}
	return true
}

func trailingZeros(m uint32) int {
	n := 0
	for m&1 == 0 {
		m >>= 1
		n++
	}
	return n
}

// apply replaces the spans (merged where they overlap) by Mask.
func apply(dst, line []byte, spans []span) ([]byte, int) {
	// Spans never take the whitespace around a secret: a mask must not join
	// two words into one name that a second pass would read differently.
	for i := range spans {
		for spans[i].from < spans[i].to && isSpace(line[spans[i].from]) {
			spans[i].from++
		}
		for spans[i].to > spans[i].from && isSpace(line[spans[i].to-1]) {
			spans[i].to--
		}
	}
	if len(spans) == 0 {
		return append(dst, line...), 0
	}
	// Insertion sort: a line has a handful of spans.
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].from < spans[j-1].from; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	n, pos := 0, 0
	for i := 0; i < len(spans); {
		sp := spans[i]
		for i++; i < len(spans) && spans[i].from <= sp.to; i++ {
			sp.to = max(sp.to, spans[i].to)
		}
		if sp.from < pos {
			sp.from = pos
		}
		if sp.to <= sp.from {
			continue
		}
		dst = append(dst, line[pos:sp.from]...)
		// Text that is already the mask stays as it is (idempotence).
		if string(line[sp.from:sp.to]) != Mask {
			n++
		}
		dst = append(dst, Mask...)
		pos = sp.to
	}
	return append(dst, line[pos:]...), n
}

// isFlag reports a command-line flag name: "--password".
func isFlag(name []byte) bool {
	return len(name) > 2 && name[0] == '-' && name[1] == '-' && (('a' <= name[2] && name[2] <= 'z') || ('A' <= name[2] && name[2] <= 'Z'))
}

func isNameByte(b byte) bool {
	return b == '_' || b == '-' || b == '.' || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
}

// nameValue looks at the name around a keyword at line[at:at+n]; when the
// name is followed by a separator and a value, it returns the value's span.
// end is where the name ends.
func (r *Redactor) nameValue(line []byte, at, n int, st *State) (sp span, ok bool, end int) {
	s, e := at, at+n
	for s > 0 && isNameByte(line[s-1]) {
		s--
	}
	for e < len(line) && isNameByte(line[e]) {
		e++
	}
	// A name that touches a mask was, before the first pass, part of a
	// longer name: judge that one, so that a second pass changes nothing
	// ("eyJ..jwt.sig=x" is not the SAS parameter "sig").
	if xs, xe := extendOverMasks(line, s, e); (xs != s || xe != e) && !r.secretName(line[xs:xe], line[at:at+n]) {
		return span{}, false, e
	}
	sp, ok = r.nameValueAt(line, s, e, at, n, st)
	return sp, ok, e
}

func extendOverMasks(line []byte, s, e int) (int, int) {
	for bytes.HasSuffix(line[:s], []byte(Mask)) {
		s -= len(Mask)
		for s > 0 && isNameByte(line[s-1]) {
			s--
		}
	}
	for bytes.HasPrefix(line[e:], []byte(Mask)) {
		e += len(Mask)
		for e < len(line) && isNameByte(line[e]) {
			e++
		}
	}
	return s, e
}

func (r *Redactor) nameValueAt(line []byte, s, e, at, n int, st *State) (span, bool) {
	name := line[s:e]
	if !r.secretName(name, line[at:at+n]) {
		return span{}, false
	}
	// Closing quote(s) of a quoted key: "token": , 'token': , \"token\":
	p := e
	for p < len(line) && (line[p] == '"' || line[p] == '\'' || line[p] == '\\') && p-e < 3 {
		p++
	}
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if p >= len(line) {
		return r.envName(line, s, st)
	}
	sep := line[p]
	switch {
	case sep == '=' || sep == ':':
		if sep == ':' && p+2 < len(line) && line[p+1] == '/' && line[p+2] == '/' {
			return span{}, false // a URL scheme, not a separator
		}
		p++
		if sep == '=' && p < len(line) && line[p] == '=' {
			return span{}, false // a comparison, "key == x"
		}
	case isFlag(name) && p > e:
		// "--password value": a flag with its value after a space.
	default:
		// A secret-looking word as a value: "name: API_TOKEN" in a pod's env.
		return r.envName(line, s, st)
	}
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	lname := bytes.ToLower(bytes.Trim(name, "-_."))
	if string(lname) == "authorization" && p < len(line) && line[p] != '"' && line[p] != '\'' {
		// A header value has spaces ("Basic xxx"): up to a quote or the end.
		end := p
		for end < len(line) && line[end] != '"' && line[end] != '\'' && line[end] != '\\' {
			end++
		}
		if end > p {
			return span{p, end}, true
		}
	}
	// Values run to the end of the line in env files ("NAME=...") and YAML
	// ("key: ..."), not after a flag ("--name=...").
	whole := lineStartsAt(line, s) && (sep == ':' || !bytes.HasPrefix(name, []byte("-")))
	v, ok := valueSpan(line, p, whole, sep)
	if !ok {
		// "token: |" starts a YAML block scalar under a secret key.
		if sep == ':' && p < len(line) && (line[p] == '|' || line[p] == '>') && len(bytes.TrimSpace(line[p+1:])) <= 2 {
			st.blockOn, st.blockDepth = true, indent(line)
		}
		return span{}, false
	}
	return v, true
}

// secretName reports whether a name containing keyword kw names a secret.
func (r *Redactor) secretName(name, kw []byte) bool {
	lname := bytes.ToLower(bytes.Trim(name, "-_."))
	switch string(bytes.ToLower(kw)) {
	case "sig":
		return string(lname) == "sig" // an Azure SAS signature parameter; not "signal", "design"
	case "authorization":
		return string(lname) == "authorization" // the header; not --authorization-mode
	case "auth":
		// Registry credentials ("auth": base64(user:password)) and basic_auth;
		// not "authentication" or "authorization-mode".
		return bytes.HasSuffix(lname, []byte("auth"))
	case "key":
		// Public keys and key identifiers of public material are not secret;
		// "monkey" or "keyboard" are harmless to mask but "public_key" data
		// helps debugging.
		if bytes.Contains(lname, []byte("public")) {
			return false
		}
	}
	// Names of paths to secrets are not secrets: --tls-private-key-file=...
	for _, suf := range []string{"file", "path", "dir", "files", "paths"} {
		if bytes.HasSuffix(lname, []byte(suf)) {
			return false
		}
	}
	return true
}

// lineStartsAt reports whether only indentation, "export " or a YAML list
// dash precede position s: then the value runs to the end of the line, as
// in env files and YAML.
func lineStartsAt(line []byte, s int) bool {
	pre := bytes.TrimLeft(line[:s], " \t")
	pre = bytes.TrimPrefix(pre, []byte("- "))
	pre = bytes.TrimPrefix(pre, []byte("export "))
	pre = bytes.Trim(pre, `"'`)
	return len(pre) == 0
}

// notSecret reports values that carry nothing to hide (flags, empties, the
// mask itself).
func notSecret(v []byte) bool {
	switch string(v) {
	case "", "true", "false", "null", "nil", "none", "~", "{}", "[]", "[redacted]":
		return true
	}
	return false
}

// valueSpan finds the value starting at p.
func valueSpan(line []byte, p int, wholeLine bool, sep byte) (span, bool) {
	if p >= len(line) || bytes.HasPrefix(line[p:], []byte(Mask)) {
		return span{}, false
	}
	var sp span
	switch {
	case line[p] == '\\' && p+1 < len(line) && line[p+1] == '"':
		// \"escaped JSON\" inside a log message
		end := bytes.Index(line[p+2:], []byte(`\"`))
		if end < 0 {
			sp = span{p + 2, len(line)}
		} else {
			sp = span{p + 2, p + 2 + end}
		}
	case line[p] == '"' || line[p] == '\'':
		q := line[p]
		end := len(line)
		for i := p + 1; i < len(line); i++ {
			if line[i] == '\\' {
				i++
				continue
			}
			if line[i] == q {
				end = i
				break
			}
		}
		sp = span{p + 1, end}
	case wholeLine:
		end := len(line)
		// A YAML or shell comment after the value.
		if i := bytes.Index(line[p:], []byte(" #")); i >= 0 {
			end = p + i
		}
		sp = span{p, end}
		for sp.to > sp.from && (line[sp.to-1] == ' ' || line[sp.to-1] == '\t' || line[sp.to-1] == '\r' || line[sp.to-1] == ',') {
			sp.to--
		}
	default:
		end := p
		for end < len(line) && !isStop(line[end]) {
			end++
		}
		sp = span{p, end}
	}
	v := bytes.ToLower(line[sp.from:sp.to])
	if notSecret(v) {
		return span{}, false
	}
	if sep == ':' && (string(v) == "|" || string(v) == ">" || string(v) == "|-" || string(v) == ">-") {
		return span{}, false
	}
	return sp, true
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\v' || b == '\f' }

func isStop(b byte) bool {
	switch b {
	case ' ', '\t', '\r', ',', ';', '&', '"', '\'', '}', ')', ']', '>', '<', '\\':
		return true
	}
	return false
}

// envName handles a secret-looking word that is the value of a "name" key:
// the env var's value follows, in the same JSON object (its span is
// returned) or on the next line (State remembers it).
func (r *Redactor) envName(line []byte, s int, st *State) (span, bool) {
	pre := bytes.TrimRight(line[:s], ` "'\`)
	pre = bytes.TrimRight(pre, " \t")
	if !bytes.HasSuffix(pre, []byte(":")) && !bytes.HasSuffix(pre, []byte("=")) {
		return span{}, false
	}
	pre = bytes.TrimRight(pre[:len(pre)-1], ` "'\`)
	if len(pre) < 4 || !bytes.EqualFold(pre[len(pre)-4:], []byte("name")) {
		return span{}, false
	}
	// The value is near in a JSON env entry; a bounded look keeps a long
	// line of names linear.
	if sp, ok := envValueLine(line, s, min(len(line), s+512)); ok {
		return sp, true
	}
	st.envValue = true
	return span{}, false
}

// envValueLine finds the value in "value: x" (YAML, the line after a secret
// env name) or "value":"x" (JSON, the same line) of an env entry.
func envValueLine(line []byte, from, searchEnd int) (span, bool) {
	i := bytes.Index(line[from:searchEnd], []byte("value"))
	if i < 0 {
		return span{}, false
	}
	i += from
	p := i + len("value")
	for p < len(line) && (line[p] == '"' || line[p] == '\'' || line[p] == '\\') {
		p++
	}
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if p >= len(line) || (line[p] != ':' && line[p] != '=') {
		return span{}, false
	}
	p++
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	return valueSpan(line, p, lineStartsAt(line, i), ':')
}

// pemSpan masks a private key's body; open reports a block that continues
// on the next lines.
func pemSpan(line []byte) (sp span, open bool) {
	b := bytes.Index(line, []byte("-----BEGIN"))
	if b < 0 {
		return span{}, false
	}
	// The label of a PEM header is upper case words: "-----BEGIN EC PRIVATE KEY-----".
	hdrEnd := 0
	for b+10+hdrEnd < len(line) {
		c := line[b+10+hdrEnd]
		if c != ' ' && !('A' <= c && c <= 'Z') && !('0' <= c && c <= '9') {
			break
		}
		hdrEnd++
	}
	if !bytes.HasPrefix(line[b+10+hdrEnd:], []byte("-----")) {
		return span{}, false
	}
	hdr := line[b : b+10+hdrEnd]
	if !bytes.Contains(hdr, []byte("PRIVATE KEY")) && !bytes.Contains(hdr, []byte("ENCRYPTED")) {
		return span{}, false
	}
	from := b + 10 + hdrEnd + 5
	if bytes.HasPrefix(bytes.TrimSpace(line[from:]), []byte(Mask)) {
		return span{}, false // redacted already
	}
	if e := bytes.Index(line[from:], []byte("-----END")); e >= 0 {
		return span{from, from + e}, false
	}
	if len(bytes.TrimSpace(line[from:])) == 0 {
		return span{}, true
	}
	return span{from, len(line)}, true
}

// base64PEM masks base64 blobs that decode to a PEM private key (kubeconfig
// client-key-data, Secrets in JSON); certificates stay readable.
func base64PEM(line []byte) []span {
	var out []span
	for off := 0; ; {
		i := bytes.Index(line[off:], []byte("LS0tLS1CRUdJTi"))
		if i < 0 {
			return out
		}
		i += off
		end := i
		for end < len(line) && isBase64(line[end]) {
			end++
		}
		head := line[i:min(end, i+80)]
		head = head[:len(head)/4*4]
		dec := make([]byte, base64.StdEncoding.DecodedLen(len(head)))
		n, _ := base64.StdEncoding.Decode(dec, head)
		if bytes.Contains(dec[:n], []byte("PRIVATE KEY")) || bytes.Contains(dec[:n], []byte("ENCRYPTED")) || n < 20 {
			out = append(out, span{i, end})
		}
		off = end
		if off >= len(line) {
			return out
		}
	}
}

func isBase64(b byte) bool {
	return b == '+' || b == '/' || b == '=' || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
}

func indent(line []byte) int {
	n := 0
	for n < len(line) && (line[n] == ' ' || line[n] == '\t') {
		n++
	}
	return n
}
