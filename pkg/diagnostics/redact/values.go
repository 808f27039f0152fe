package redact

import (
	"bytes"
	"regexp"
)

// name looks at the name around a name trigger at line[at:at+n]. It returns
// where the name ends (a name is judged once, however many secret words it
// holds).
func (c *lineCtx) name(at, n int) (end int) {
	line := c.line
	s, e := at, at+n
	for s > 0 && isNameByte(line[s-1]) {
		s--
	}
	for e < len(line) && isNameByte(line[e]) {
		e++
	}
	// A name that touches a mask was part of a longer name before the
	// first pass: judge that one, so that a second pass changes nothing.
	xs, xe := extendOverMasks(line, s, e)
	if xs != s || xe != e {
		if c.r.names.judge(line[xs:xe]).v == notSecret {
			return e
		}
		s = xs // what precedes it decides as in the first pass ("-x" is no flag there)
	}
	j := c.r.names.judge(line[s:e])
	if j.v == notSecret {
		return e
	}
	vs, ok := c.valueAfter(s, e, j.header)
	if !ok {
		return e
	}
	val := line[vs.from:vs.to]
	if j.v == qualified && (j.keep(bytes.TrimSpace(val)) || c.keyOfPair(s, e, val)) {
		// A kept value opens nothing for the next lines.
		c.st.block, c.st.tomlDelim = false, ""
		return e
	}
	c.add(vs.from, vs.to, vs.eol)
	if vs.from >= e && vs.from-e <= 8 {
		return max(e, vs.to) // the value right after the name is masked whole
	}
	return e
}

// keyOfPair reports the name of a key/value pair ("Key": "DB_PASSWORD",
// key="ApiKey"): the value of "key" is then a secret's name, kept, and the
// pair's value is found from it (envName).
func (c *lineCtx) keyOfPair(s, e int, val []byte) bool {
	if !bytes.EqualFold(c.line[s:e], []byte("key")) {
		return false
	}
	val = bytes.Trim(bytes.TrimSpace(val), `"'`)
	for _, b := range val {
		if !isNameByte(b) {
			return false
		}
	}
	return len(val) > 0 && c.r.names.judge(val).v != notSecret
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

// valueAfter finds the value of the secret name at line[s:e], and records
// what the name opens for the next lines (a YAML block or subtree, a TOML
// multi-line string, an env var list entry).
func (c *lineCtx) valueAfter(s, e int, header bool) (span, bool) {
	line, st := c.line, c.st
	name := line[s:e]
	// Quotes closing a quoted key: "token": , 'token': , \"token\": , \\\"x\\\":
	p := e
	for p < len(line) && (line[p] == '"' || line[p] == '\'' || line[p] == '\\') && p-e < 8 {
		p++
	}
	quotedKey := p > e && (line[p-1] == '"' || line[p-1] == '\'')
	// An assignment inside quotes: "DB_PASSWORD=a b", 'Authorization: Basic x'.
	var openQuote byte
	if !quotedKey && s > 0 && (line[s-1] == '"' || line[s-1] == '\'') {
		openQuote = line[s-1]
	}
	gap := p
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	xml := s > 0 && line[s-1] == '<'
	if p >= len(line) {
		if col, ok := c.listItemAt(s); ok && isFlag(name) {
			// "- --password": the next list item is the value.
			st.flagItem = col + 1
			return span{}, false
		}
		// A bare secret word may be an env var's name whose value follows.
		return c.envName(s)
	}
	sep := line[p]
	switch {
	case sep == '=' || sep == ':':
		if sep == ':' && bytes.HasPrefix(line[p:], []byte("://")) {
			return span{}, false // a URL scheme, not a separator
		}
		p++
		if p < len(line) && sep == '=' && line[p] == '=' {
			return span{}, false // a comparison, "key == x"
		}
		if p < len(line) && ((sep == '=' && line[p] == '>') || (sep == ':' && line[p] == '=')) {
			p++ // "'password' => x" (Ruby, PHP), "password := x" (Go)
		}
	case sep == '>' && xml:
		p++
	case isFlag(name) && p > gap:
		// "--password value": a flag and its value after a space.
		if p < len(line) && line[p] == '-' {
			return span{}, false
		}
		return argSpan(line, p, openQuote)
	case isFlag(name) && quotedKey && sep == ',':
		// ["--password", "value"]: a flag and its value in a list.
		if q, ok := listElement(line, gap); ok {
			return argSpan(line, q, 0)
		}
		return span{}, false
	case p > gap && c.directive(s, p):
		// "password s3cret" alone on a line (netrc, redis.conf), or in a
		// netrc "machine h login u password p".
		return argSpan(line, p, openQuote)
	default:
		// A secret-looking word as a value: "name: API_TOKEN" in an env list.
		return c.envName(s)
	}
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if xml {
		return xmlValue(line, p)
	}
	whole := c.first && c.atLineStart(s) && !(openQuote != 0) && (sep == ':' || !bytes.HasPrefix(name, []byte("-")))
	if p >= len(line) {
		if sep == ':' && whole {
			// "auth:" opens a YAML mapping or list of secret things.
			st.subtree, st.subtreeDepth, st.stateBase = true, keyColumn(line, s), c.base
		}
		return span{}, false
	}
	v, ok := c.valueSpan(s, p, sep, whole, openQuote, header)
	if !ok {
		return span{}, false
	}
	return v, true
}

// argSpan is the command-line argument at p, inside its quotes; encl is
// the quote of a string it stands in, or 0.
func argSpan(line []byte, p int, encl byte) (span, bool) {
	if bytes.HasPrefix(line[p:], []byte(Mask)) {
		return span{}, false
	}
	v := argAt(line, p, encl)
	if len(v) > 1 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return span{from: p + 1, to: p + len(v) - 1}, len(v) > 2
	}
	return span{from: p, to: p + len(v)}, len(v) > 0
}

// atLineStart reports whether only indentation, "export ", a YAML list
// dash or quotes precede position s (after the log prefix: a name inside
// the prefix, as a syslog tag "token:", is not at the start).
func (c *lineCtx) atLineStart(s int) bool {
	if s < c.base {
		return false
	}
	pre := bytes.TrimLeft(c.line[c.base:s], " \t")
	pre = bytes.TrimPrefix(pre, []byte("- "))
	pre = bytes.TrimPrefix(pre, []byte("export "))
	pre = bytes.Trim(pre, `"'`)
	return len(pre) == 0
}

// directive reports "name value" forms without a separator: the line is
// just the two (netrc's multi-line form, redis.conf), or a netrc line.
func (c *lineCtx) directive(s, p int) bool {
	line := c.line
	if !c.first {
		return false
	}
	if c.atLineStart(s) {
		v := bytes.TrimSpace(line[p:])
		// Alone on a line, a word after it is prose ("Token expired"), and
		// masked text was a value of its own.
		return bytes.IndexAny(v, " \t") < 0 && !plainWord(v) && !bytes.Contains(v, []byte(Mask))
	}
	return c.netrcLine()
}

// isFlag reports a command-line flag name: "--password", "-token" (Go's
// flag package takes one dash).
func isFlag(name []byte) bool {
	if len(name) > 2 && name[0] == '-' && name[1] == '-' && classOf(name[2]) != clsOther {
		return true
	}
	return len(name) > 3 && name[0] == '-' && classOf(name[1]) == clsLower && classOf(name[2]) == clsLower
}

// valueSpan finds the value starting at p after the separator of the name
// at s.
func (c *lineCtx) valueSpan(s, p int, sep byte, whole bool, openQuote byte, header bool) (span, bool) {
	line, st := c.line, c.st
	if bytes.HasPrefix(line[p:], []byte(Mask)) {
		return span{}, false
	}
	var sp span
	// A quoted value, also escaped (\"x\" inside a log message, and deeper).
	if q, qlen := quoteAt(line, p); qlen > 0 {
		from := p + qlen
		to := closingQuote(line, from, line[p:p+qlen], q)
		sp = span{from: from, to: to, eol: to == len(line)}
		if whole && sep == ':' && to == len(line) {
			// A quoted YAML scalar that goes on over the next lines.
			st.block, st.blockDepth, st.stateBase = true, keyColumn(line, s), c.base
		}
		if qlen == 1 && (bytes.HasPrefix(line[p:], []byte(`"""`)) || bytes.HasPrefix(line[p:], []byte(`'''`))) {
			// A TOML multi-line string.
			delim := line[p : p+3]
			if e := bytes.Index(line[p+3:], delim); e >= 0 {
				return span{from: p + 3, to: p + 3 + e}, p+3+e > p+3
			}
			st.tomlDelim = string(delim)
			return span{from: p + 3, to: len(line), eol: true}, true
		}
		return sp, sp.to > sp.from
	}
	switch {
	case openQuote != 0:
		e := bytes.IndexByte(line[p:], openQuote)
		if e < 0 {
			sp = span{from: p, to: len(line), eol: true}
		} else {
			sp = span{from: p, to: p + e}
		}
	case header:
		// A header value has spaces and quotes ("Digest username=\"u\",
		// response=...", cookies): it runs to the end of the line.
		sp = span{from: p, to: len(line), eol: true}
		if i := bytes.IndexByte(line[p:], '\r'); i >= 0 {
			sp = span{from: p, to: p + i}
		}
	case whole:
		sp = span{from: p, to: len(line), eol: true}
		if sep == ':' {
			// A YAML comment after the value.
			if i := bytes.Index(line[p:], []byte(" #")); i >= 0 {
				sp = span{from: p, to: p + i}
			}
		}
		for sp.to > sp.from && (isSpace(line[sp.to-1]) || line[sp.to-1] == ',') {
			sp.to--
		}
	default:
		sp = span{from: p, to: valueEnd(line, s, p)}
		sp.eol = sp.to == len(line)
	}
	v := bytes.TrimSpace(line[sp.from:sp.to])
	if isNotSecretValue(v) {
		return span{}, false
	}
	if sep == ':' && whole {
		switch string(v) {
		case "|", ">", "|-", ">-", "|+", ">+":
			st.block, st.blockDepth, st.stateBase = true, keyColumn(line, s), c.base
			return span{}, false
		case "{", "[":
			return span{}, false // JSON: the members are judged by their names
		}
		// A plain scalar may go on over more-indented lines (YAML folds
		// long strings).
		st.block, st.blockDepth, st.stateBase = true, keyColumn(line, s), c.base
	}
	return sp, true
}

// valueEnd finds where an unquoted value inside a line ends. What may end
// it depends on what precedes the name: a query parameter ends at '&', a
// connection-string field at ';', a member of a flow mapping at ',' or a
// bracket; anywhere else the value runs to whitespace (a password may hold
// ',' and ';').
func valueEnd(line []byte, s, p int) int {
	var before byte
	if s > 0 {
		before = line[s-1]
	}
	if before == '-' && s > 1 {
		before = line[s-2] // "--token": what precedes the dashes
	}
	stops := &stopsSpace
	switch before {
	case '?', '&':
		stops = &stopsQuery
	case ';':
		stops = &stopsField
	case ',', '{', '(', '[':
		stops = &stopsMember
	}
	e := p
	for e < len(line) && !stops[line[e]] {
		e++
	}
	return e
}

var (
	stopsSpace  = byteSet(" \t\r\"'\\")
	stopsQuery  = byteSet(" \t\r\"'\\&#")
	stopsField  = byteSet(";\"'\\\r")
	stopsMember = byteSet(" \t\r\"'\\,}])")
)

func byteSet(s string) (t [256]bool) {
	for i := 0; i < len(s); i++ {
		t[s[i]] = true
	}
	return t
}

// quoteAt reports a (possibly escaped) quote at p: its quote byte and the
// length of the opener (`"` 1, `\"` 2, `\\\"` 4).
func quoteAt(line []byte, p int) (byte, int) {
	i := p
	for i < len(line) && line[i] == '\\' && i-p < 8 {
		i++
	}
	if i < len(line) && (line[i] == '"' || line[i] == '\'') {
		return line[i], i - p + 1
	}
	return 0, 0
}

// closingQuote finds the end of a quoted value opened by opener.
func closingQuote(line []byte, from int, opener []byte, q byte) int {
	if len(opener) > 1 {
		if e := bytes.Index(line[from:], opener); e >= 0 {
			return from + e
		}
		return len(line)
	}
	for i := from; i < len(line); i++ {
		if line[i] == '\\' {
			i++
			continue
		}
		if line[i] == q {
			return i
		}
	}
	return len(line)
}

// xmlValue is an element's text: "<password>x</password>", CDATA included.
func xmlValue(line []byte, p int) (span, bool) {
	if bytes.HasPrefix(line[p:], []byte("<![CDATA[")) {
		from := p + len("<![CDATA[")
		if e := bytes.Index(line[from:], []byte("]]>")); e >= 0 {
			return span{from: from, to: from + e}, e > 0
		}
		return span{from: from, to: len(line), eol: true}, true
	}
	e := bytes.IndexByte(line[p:], '<')
	if e < 0 {
		return span{from: p, to: len(line), eol: true}, p < len(line)
	}
	return span{from: p, to: p + e}, e > 0
}

// envFields name the field that holds a variable's name, with its value in
// a "value" field beside it: "name" (pod env lists, XML properties), "key"
// (ECS, AWS tags, .NET appSettings).
func envFields() []string { return []string{"name", "key"} }

// envName handles a secret-looking word that is the value of a "name" or
// "key" field (a pod's env list, ECS, AWS tags, XML properties): the value
// follows in the same object (its span is returned) or on the next line
// (State remembers it).
func (c *lineCtx) envName(s int) (span, bool) {
	line := c.line
	pre := bytes.TrimRight(line[:s], " \t\"'\\")
	if len(pre) == 0 {
		return span{}, false
	}
	switch pre[len(pre)-1] {
	case ':', '=', '>':
	default:
		return span{}, false
	}
	pre = bytes.TrimRight(pre[:len(pre)-1], " \t\"'\\")
	pre = bytes.TrimSuffix(pre, []byte("<"))
	ok := false
	for _, w := range c.r.envFields {
		if len(pre) >= len(w) && bytes.EqualFold(pre[len(pre)-len(w):], []byte(w)) &&
			(len(pre) == len(w) || !isNameByte(pre[len(pre)-len(w)-1]) || pre[len(pre)-len(w)-1] == '<') {
			ok = true
		}
	}
	if !ok {
		return span{}, false
	}
	// The value is near in a JSON or XML entry; a bounded look keeps a long
	// line of names linear.
	if sp, ok := envValueLine(line, s, min(len(line), s+512), c.base); ok {
		return sp, true
	}
	c.st.envValue = true
	return span{}, false
}

// envValueLine finds the value in "value: x" (YAML, the line after a secret
// env name), "value":"x" (JSON), value="x" or <value>x</value> (XML).
func envValueLine(line []byte, from, searchEnd, base int) (span, bool) {
	i := indexFold(line[from:searchEnd], "value")
	if i < 0 {
		return span{}, false
	}
	i += from
	p := i + len("value")
	xml := i > 0 && line[i-1] == '<'
	for p < len(line) && (line[p] == '"' || line[p] == '\'' || line[p] == '\\') {
		p++
	}
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if p >= len(line) || (line[p] != ':' && line[p] != '=' && !(xml && line[p] == '>')) {
		return span{}, false
	}
	p++
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	if xml {
		return xmlValue(line, p)
	}
	if q, qlen := quoteAt(line, p); qlen > 0 {
		to := closingQuote(line, p+qlen, line[p:p+qlen], q)
		return span{from: p + qlen, to: to}, to > p+qlen
	}
	e := p
	whole := len(bytes.TrimLeft(line[base:i], " \t-")) == 0
	for e < len(line) && (whole || bytes.IndexByte([]byte(" \t,}\"'\\"), line[e]) < 0) {
		e++
	}
	v := bytes.TrimSpace(line[p:e])
	if isNotSecretValue(v) {
		return span{}, false
	}
	return span{from: p, to: e}, true
}

func indexFold(s []byte, word string) int {
	for i := 0; i+len(word) <= len(s); i++ {
		if lowerByte(s[i]) == word[0] && bytes.EqualFold(s[i:i+len(word)], []byte(word)) {
			return i
		}
	}
	return -1
}

// notSecretValues carry nothing to hide.
func isNotSecretValue(v []byte) bool {
	if len(v) > 10 {
		return false
	}
	var buf [10]byte
	for i, b := range v {
		buf[i] = lowerTable[b]
	}
	switch string(buf[:len(v)]) {
	case "", "true", "false", "null", "nil", "none", "~", "{}", "[]", `""`, "''", "[redacted]", "<nil>":
		return true
	}
	return false
}

// isPath reports an absolute or relative path without spaces.
func isPath(v []byte) bool {
	if len(v) == 0 || bytes.ContainsAny(v, " \t\"'") {
		return false
	}
	return v[0] == '/' || bytes.HasPrefix(v, []byte("./")) || bytes.HasPrefix(v, []byte("../")) || bytes.HasPrefix(v, []byte("~/"))
}

var labelKeyRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// isQuantity reports a number, a duration or a size: "2048", "1.5",
// "24h0m0s", "30s", "100Mi", "80%".
func isQuantity(v []byte) bool {
	if len(v) == 0 || classOf(v[0]) != clsDigit {
		return false
	}
	for _, b := range v {
		switch {
		case classOf(b) == clsDigit, b == '.', b == '%':
		case classOf(b) == clsLower || classOf(b) == clsUpper:
			switch b {
			case 'n', 'u', 's', 'm', 'h', 'd', 'K', 'M', 'G', 'T', 'i', 'k':
			default:
				return false
			}
		default:
			return false
		}
	}
	return true
}

// isWordList reports a plain word or words joined by punctuation, each
// starting with a letter or digit: "Webhook", "Node,RBAC", "hmac-sha256".
func isWordList(v []byte) bool {
	if len(v) == 0 || classOf(v[0]) == clsDigit || classOf(v[0]) == clsOther {
		return false
	}
	prevSep := false
	for _, b := range v {
		switch {
		case classOf(b) != clsOther:
			prevSep = false
		case bytes.IndexByte([]byte("-_.,:+/"), b) >= 0 && !prevSep:
			prevSep = true
		default:
			return false
		}
	}
	return !prevSep
}

// isLabelKey reports a Kubernetes label or taint key with a DNS prefix.
func isLabelKey(v []byte) bool {
	return len(v) <= 316 && labelKeyRE.Match(bytes.Trim(v, `"'`))
}

// isNSSwitchSources reports an nsswitch.conf database's source list.
func isNSSwitchSources(v []byte) bool {
	fs := bytes.Fields(v)
	if len(fs) == 0 {
		return false
	}
	for _, f := range fs {
		if f[0] == '[' && f[len(f)-1] == ']' {
			continue // [NOTFOUND=return]
		}
		switch string(f) {
		case "files", "systemd", "sss", "ldap", "nis", "nisplus", "compat", "db", "winbind", "altfiles", "cache", "extrausers", "usrfiles", "hesiod":
		default:
			return false
		}
	}
	return true
}

// isHarmless reports a value that a qualified name may keep: a path, a
// URL (credentials in it are masked on their own), a number, a duration, a
// quantity, or a plain word or list of words (a mode, a type, an algorithm,
// an object's name) that is not shaped like a token.
func isHarmless(v []byte) bool {
	v = bytes.Trim(v, `"'`)
	switch {
	case isNotSecretValue(v), isPath(v), bytes.Contains(v, []byte("://")):
		return true
	case len(v) <= 24 && isQuantity(v):
		return true
	case len(v) <= 64 && isWordList(v):
		return !tokenShaped(v)
	}
	return false
}

// tokenShaped reports a word mixing upper case, lower case and digits at a
// length where that is rarely a word: "Xk9mQ2pL7vR4".
func tokenShaped(v []byte) bool {
	var upper, lower, digit int
	for _, b := range v {
		switch classOf(b) {
		case clsUpper:
			upper++
		case clsLower:
			lower++
		case clsDigit:
			digit++
		}
	}
	return (len(v) >= 12 && upper > 0 && lower > 0 && digit > 0) || digit >= 8
}

// keyColumn is the column of a YAML key starting at s (its opening quote
// included): lines that continue its value are indented further.
func keyColumn(line []byte, s int) int {
	if s > 0 && (line[s-1] == '"' || line[s-1] == '\'') {
		return s - 1
	}
	return s
}

func indent(line []byte) int {
	n := 0
	for n < len(line) && (line[n] == ' ' || line[n] == '\t') {
		n++
	}
	return n
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\v' || b == '\f' }

// listItemAt reports whether the name at s is a YAML block list item's
// whole content ("  - --token", "- '--token'"), and its dash's column.
func (c *lineCtx) listItemAt(s int) (int, bool) {
	pre := c.line[c.base:s]
	pre = bytes.TrimRight(pre, "\"'")
	pre = bytes.TrimRight(pre, " \t")
	d := len(pre) - 1
	return d, d >= 0 && pre[d] == '-' && len(bytes.TrimLeft(pre[:d], " \t")) == 0 && s > c.base+d+1
}

// flagItemValue is the value of the list item at dash column col on the
// line after a secret flag's item: "- s3cret", "- 's3cret'".
func (c *lineCtx) flagItemValue(col int) (span, bool) {
	line := c.line
	d := c.base + col
	if d+1 >= len(line) || line[d] != '-' || !isSpace(line[d+1]) || len(bytes.TrimLeft(line[c.base:d], " \t")) != 0 {
		return span{}, false
	}
	p := d + 1
	for p < len(line) && isSpace(line[p]) {
		p++
	}
	e := len(bytes.TrimRight(line, " \t\r"))
	if p >= e || line[p] == '-' || bytes.HasPrefix(line[p:], []byte(Mask)) {
		return span{}, false // no value, or the next flag
	}
	if q := line[p]; (q == '"' || q == '\'') && e-p > 1 && line[e-1] == q {
		p, e = p+1, e-1
	}
	return span{from: p, to: e, eol: e == len(line)}, e > p
}
