// Package redact removes secrets from text before it leaves the node.
//
// A secret is found by its name (a variable, key, flag, header or element
// whose name has a secret word as one of its whole parts: see names.go),
// by its own format (private-key blocks, JWTs, cloud and SaaS token
// formats, passwords in URLs and connection strings, password hashes, the
// password forms of common command lines: formats.go), or by its shape
// (runs of random base64, which is what key material looks like when its
// armour is out of the window: keys.go).
//
// It works line by line on a stream, carrying what a line opens for the
// next ones (a key block, a YAML block or subtree under a secret key, an
// env var whose value is on the next line). A literal prefilter keeps it
// cheap: a line without any trigger costs two table lookups per byte. It
// errs on the side of removing too much: a bundle with a redacted log field
// is still useful, one with a leaked key is an incident.
package redact

import (
	"bytes"
	"slices"
	"strings"
)

// Mask replaces every secret.
const Mask = "[REDACTED]"

// triggerKind says what a trigger literal starts.
type triggerKind uint8

const (
	tName     triggerKind = iota // a secret word inside a name
	tFormat                      // formats()[idx]
	tScheme                      // "Bearer x", "Basic x"
	tURL                         // scheme://user:password@host
	tDSN                         // user:password@tcp(host)
	tFlag                        // cmdFlags()[idx]
	tPEMBegin                    // -----BEGIN ...
	tPEMEnd                      // -----END ...
	tB64PEM                      // base64("-----BEGIN")
	tPuTTY                       // Private-Lines: N
)

type trigger struct {
	lit  string // lower case
	kind triggerKind
	idx  int
}

// Redactor rewrites text. It is immutable and safe for concurrent use; the
// per-stream state lives in State.
type Redactor struct {
	// pairs maps the first two lower-cased bytes of a trigger literal to
	// its bucket (index + 1): the prefilter.
	pairs    [1 << 16]uint16
	buckets  []bucket
	triggers []trigger
	// cls classifies bytes for base64 runs: clsB64 (alphanumerics),
	// clsStd (+ /), clsURL (- _).
	cls   [256]uint8
	lower [256]byte

	names       nameRules
	formats     []format
	flags       []cmdFlag
	pemPublic   []string
	netrcWords  []string
	envFields   []string
	pemHeaders  []string
	sshKeyTypes []string
}

const (
	clsB64 = 1 << iota
	clsStd
	clsURL
)

// bucket is the triggers sharing their first two bytes, and the bit set of
// the third bytes they go on with: most pair hits stop there.
type bucket struct {
	triggers []uint16
	third    [4]uint64
	anyThird bool // a two-byte trigger
}

func (b *bucket) admits(c byte) bool { return b.anyThird || b.third[c>>6]&(1<<(c&63)) != 0 }

// rules is everything a Redactor matches; tests build Redactors with one
// entry removed to check that every entry is needed.
type rules struct {
	names     nameRules
	formats   []format
	flags     []cmdFlag
	schemes   []string
	dsn       []string
	pemPublic []string
	// structural: the triggers of forms that are no list of their own.
	structural []trigger
	// netrcWords make a line a netrc entry; envFields name the field that
	// holds a variable's name beside its value; pemHeaders and sshKeyTypes
	// are public parts of key files.
	netrcWords  []string
	envFields   []string
	pemHeaders  []string
	sshKeyTypes []string
}

func defaultRules() rules {
	return rules{names: defaultNameRules(), formats: formats(), flags: cmdFlags(), schemes: authSchemes(),
		dsn: dsnMarkers(), pemPublic: publicPEMLabels(), structural: structuralTriggers(),
		netrcWords: netrcWords(), envFields: envFields(), pemHeaders: pemHeaders(), sshKeyTypes: sshKeyTypes()}
}

// structuralTriggers start the forms that have one literal each: URLs with
// userinfo, PEM and SSH2 armour, base64 of a PEM header, PuTTY's private
// lines.
func structuralTriggers() []trigger {
	return []trigger{
		{lit: "://", kind: tURL},
		{lit: "-----begin ", kind: tPEMBegin}, {lit: "---- begin ", kind: tPEMBegin},
		{lit: "-----end ", kind: tPEMEnd}, {lit: "---- end ", kind: tPEMEnd},
		{lit: "ls0tls1crudjti", kind: tB64PEM}, // base64("-----BEGIN")
		{lit: "private-lines:", kind: tPuTTY},
	}
}

// New builds a Redactor.
func New() *Redactor { return newRedactor(defaultRules()) }

func newRedactor(rs rules) *Redactor {
	r := &Redactor{names: rs.names, formats: rs.formats, flags: rs.flags, pemPublic: rs.pemPublic,
		netrcWords: rs.netrcWords, envFields: rs.envFields, pemHeaders: rs.pemHeaders, sshKeyTypes: rs.sshKeyTypes}
	r.names.compile()
	for i := range r.cls {
		b := byte(i)
		r.lower[i] = lowerByte(b)
		switch {
		case classOf(b) != clsOther:
			r.cls[i] = clsB64
		case b == '+' || b == '/':
			r.cls[i] = clsStd
		case b == '-' || b == '_':
			r.cls[i] = clsURL
		}
	}
	var ts []trigger
	for i, w := range rs.names.words {
		ts = append(ts, trigger{lit: w.word, kind: tName, idx: i})
	}
	for i, f := range rs.formats {
		ts = append(ts, trigger{lit: strings.ToLower(f.prefix), kind: tFormat, idx: i})
	}
	for _, s := range rs.schemes {
		ts = append(ts, trigger{lit: s, kind: tScheme})
	}
	for _, d := range rs.dsn {
		ts = append(ts, trigger{lit: d, kind: tDSN})
	}
	for i, f := range rs.flags {
		ts = append(ts, trigger{lit: strings.ToLower(f.flag), kind: tFlag, idx: i})
	}
	ts = append(ts, rs.structural...)
	r.triggers = ts
	for i, t := range ts {
		k := uint16(t.lit[0])<<8 | uint16(t.lit[1])
		if r.pairs[k] == 0 {
			r.buckets = append(r.buckets, bucket{})
			r.pairs[k] = uint16(len(r.buckets))
		}
		b := &r.buckets[r.pairs[k]-1]
		b.triggers = append(b.triggers, uint16(i))
		if len(t.lit) == 2 {
			b.anyThird = true
		} else {
			c := t.lit[2]
			b.third[c>>6] |= 1 << (c & 63)
		}
	}
	return r
}

// State carries what a line leaves open for the next ones.
type State struct {
	pem      pemKind // in a PEM block ...
	pemLeft  int     // ... for at most this many more lines ...
	pemShape uint64  // ... whose body lines have this prefix
	// block: the lines indented deeper than blockDepth continue the value
	// of a secret YAML key (a block scalar, a folded plain or quoted one).
	block      bool
	blockDepth int
	// stateBase is the log prefix length of the line that opened block or
	// subtree: a line with another prefix is not below it.
	stateBase int
	// subtree: "auth:" with nothing after it; the values below it are
	// masked unless harmless.
	subtree      bool
	subtreeDepth int
	tomlDelim    string // in a TOML multi-line string under a secret key
	envValue     bool   // the previous line was "name: <SECRET NAME>"
	// flagItem: the previous line was a YAML list item holding a secret
	// flag alone ("- --password"); the item after it (its dash at column
	// flagItem-1) is the flag's value.
	flagItem int
	ppkLeft  int // PuTTY private lines still to come
	// keyRun: the previous line held key material, its last field after a
	// prefix of shape keyShape; a short base64 line of the same shape
	// after it is the block's last line.
	keyRun   bool
	keyShape uint64
	// restOfLine: a value runs on past the part of an overlong line seen
	// so far; the rest of the line is masked.
	restOfLine bool
}

// span is a part of the text to mask; eol marks a value that runs to the
// end of the line (it goes on in the next piece of a cut line).
type span struct {
	from, to int
	eol      bool
}

// lineCtx is the work on one line (or one window of an overlong line).
type lineCtx struct {
	r     *Redactor
	line  []byte
	st    *State
	first bool // line[0] is the start of a line
	// base is where the message starts after a syslog or journal prefix:
	// YAML, env files and the like printed into a log are judged from
	// there.
	base  int
	spans []span
	runs  []run
	// publicRun: base64 known to be public (a certificate's), not key
	// material.
	publicRun   []span
	keyMaterial bool
	pemClosed   bool
	field       field
	hasEnd      bool // an END line of a secret block

	// Per-line guards that keep a line with many triggers linear: where
	// the text a handler has looked at ends (a later hit before it is
	// inside what was seen), and lookups done once per line.
	done     [doneKinds]int
	netrc    int8 // 0 unknown, 1 a netrc line, -1 not
	firstPEM int  // where the first BEGIN is (-1 none, -2 not looked)
	tools    map[string]int
}

// done kinds: handlers that scan past their hit.
const (
	doneFormat = iota
	donePEM
	doneB64PEM
	doneURL
	doneDSN
	doneKinds
)

// netrcWords are the netrc tokens (besides "password") that make a line a
// netrc entry, in which "password x" is a password whatever stands before
// it ("machine h login u password p", "default login u password p").
func netrcWords() []string { return []string{"machine ", "login ", "default "} }

// netrcLine reports a line with netrc words: looked up once per line.
func (c *lineCtx) netrcLine() bool {
	if c.netrc == 0 {
		c.netrc = -1
		for _, w := range c.r.netrcWords {
			if bytes.Contains(c.line, []byte(w)) {
				c.netrc = 1
			}
		}
	}
	return c.netrc > 0
}

// toolBefore reports whether tool appears in the line before i (looked up
// once per line and tool).
func (c *lineCtx) toolBefore(tool string, i int) bool {
	if c.tools == nil {
		c.tools = map[string]int{}
	}
	at, ok := c.tools[tool]
	if !ok {
		at = bytes.Index(c.line, []byte(tool))
		c.tools[tool] = at
	}
	return at >= 0 && at < i
}

// beginBefore reports a PEM BEGIN before i on the line.
func (c *lineCtx) beginBefore(i int) bool {
	if c.firstPEM == -2 {
		a, b := bytes.Index(c.line, []byte("-----BEGIN ")), bytes.Index(c.line, []byte("---- BEGIN "))
		c.firstPEM = a
		if a < 0 || (b >= 0 && b < a) {
			c.firstPEM = b
		}
	}
	return c.firstPEM >= 0 && c.firstPEM < i
}

// masks reports whether a span found so far covers position i.
func (c *lineCtx) masks(i int) bool {
	for _, sp := range c.spans {
		if sp.from <= i && i < sp.to {
			return true
		}
	}
	return false
}

func (c *lineCtx) add(from, to int, eol bool) {
	if to > from {
		c.spans = append(c.spans, span{from: from, to: to, eol: eol})
	}
}

// Line appends the redacted line (without its newline) to dst and returns it
// with the number of secrets masked. It sees one line only: a stream goes
// through a Writer, which also looks at the line after.
func (r *Redactor) Line(dst, line []byte, st *State) ([]byte, int) {
	out, n, _ := r.redact(dst, line, 0, len(line), st, true, true)
	return out, n
}

// String redacts a whole text (an error message, a small file) as a stream.
func (r *Redactor) String(s string) (string, int) {
	var b bytes.Buffer
	w := r.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.String(), w.Redactions()
}

// Field returns a value of structured data (the agent's own config) as it
// may leave the node. path holds the field names from the root to the value
// (list items add none). The value is masked when its field's name is
// secret, or when it lies below a secret name and is not harmless (a path,
// a number, a plain word); otherwise it is redacted as text.
func (r *Redactor) Field(path []string, value string) string {
	if len(path) > 0 && !isNotSecretValue([]byte(value)) {
		switch j := r.names.judge([]byte(path[len(path)-1])); j.v {
		case secretValue:
			return Mask
		case qualified:
			if !j.keep([]byte(value)) {
				return Mask
			}
		}
		for _, p := range path[:len(path)-1] {
			if r.names.judge([]byte(p)).v == secretValue && !isHarmless([]byte(value)) {
				return Mask
			}
		}
	}
	out, _ := r.String(value)
	return out
}

// lineInfo is what the Writer needs to know about a redacted line.
type lineInfo struct {
	hasEnd bool // it holds the END line of a secret block
}

// redact appends text[from:to], redacted, to dst. text may hold context
// before from and after to (the neighbouring pieces of an overlong line);
// first and last say whether text starts and ends a line.
func (r *Redactor) redact(dst, text []byte, from, to int, st *State, first, last bool) ([]byte, int, lineInfo) {
	c := lineCtx{r: r, line: text, st: st, first: first, firstPEM: -2}
	if first {
		c.base = logPrefix(text)
	}
	if !first && st.restOfLine {
		return append(dst, Mask...), boolInt(to > from), lineInfo{}
	}
	if first {
		st.restOfLine = false
		if c.continued() {
			return c.apply(dst, from, to, last)
		}
	}
	envValue, flagItem := st.envValue, st.flagItem
	st.envValue, st.flagItem = false, 0
	child := first && st.subtree && c.inSubtree()

	c.scan()
	if envValue {
		if sp, ok := envValueLine(text, c.base, len(text), c.base); ok {
			c.add(sp.from, sp.to, sp.eol)
		}
	}
	if flagItem > 0 && first {
		if sp, ok := c.flagItemValue(flagItem - 1); ok {
			c.add(sp.from, sp.to, sp.eol)
		}
	}
	if child {
		c.childValue()
	}
	c.keyRuns()
	if first {
		c.pgpass()
		c.runRule()
	}
	return c.apply(dst, from, to, last)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// continued handles a line that continues what an earlier line opened; it
// reports whether the line is done.
func (c *lineCtx) continued() bool {
	st, line := c.st, c.line
	blank := len(bytes.TrimSpace(line)) == 0
	switch {
	case st.ppkLeft > 0:
		st.ppkLeft--
		c.add(c.col(), len(bytes.TrimRight(line, " \t\r")), false)
		c.keyMaterial = true
		return true
	case st.tomlDelim != "":
		if i := bytes.Index(line, []byte(st.tomlDelim)); i >= 0 {
			c.add(c.base, i, false)
			st.tomlDelim = ""
			return true
		}
		c.add(c.base, len(line), true)
		return true
	case st.pem != pemNone:
		if c.inPEM() {
			return true
		}
	}
	if st.block {
		if blank {
			return true
		}
		if c.below() && c.col() > st.blockDepth {
			c.add(c.col(), len(line), true)
			return true
		}
		st.block = false
	}
	return false
}

// inSubtree reports a line below an "auth:" that opened a subtree, and ends
// the subtree at a line that is not.
func (c *lineCtx) inSubtree() bool {
	line := c.line
	if len(bytes.TrimSpace(line[c.base:])) == 0 {
		return false
	}
	in := c.col()
	if c.below() && (in > c.st.subtreeDepth || (in == c.st.subtreeDepth && bytes.HasPrefix(line[in:], []byte("- ")))) {
		return true
	}
	c.st.subtree = false
	return false
}

// childValue masks the value of a line inside a secret subtree unless it is
// harmless ("mode: Webhook" under "authorization:" stays).
func (c *lineCtx) childValue() {
	line := c.line
	p := c.col()
	if bytes.HasPrefix(line[p:], []byte("- ")) {
		p += 2
	}
	v := p
	k := yamlKeyEnd(line, p)
	if k >= 0 {
		v = k + 1
		for v < len(line) && isSpace(line[v]) {
			v++
		}
	}
	e := len(line)
	if i := bytes.Index(line[v:], []byte(" #")); i >= 0 {
		e = v + i
	}
	if k >= 0 && c.masks(k) {
		// A secret found in the key takes its ':' ("-p00A:"): what is
		// written is no key any more, and is masked whole, as a second
		// pass would.
		c.add(p, e, e == len(line))
		return
	}
	val := bytes.TrimSpace(line[v:e])
	switch string(val) {
	case "", "|", ">", "|-", ">-", "|+", ">+":
		if len(val) > 0 {
			c.st.block, c.st.blockDepth, c.st.stateBase = true, c.col(), c.base
		}
		return
	}
	// A list item is one of the secret things; a keyed value may be
	// harmless ("mode: Webhook" under "authorization:").
	if (k < 0 && !isNotSecretValue(val)) || !isHarmless(val) {
		c.add(v, e, true)
	}
}

// yamlKeyEnd finds the ':' ending a YAML key that starts at p, or -1.
func yamlKeyEnd(line []byte, p int) int {
	for i := p; i < len(line); i++ {
		switch line[i] {
		case ':':
			if i+1 == len(line) || isSpace(line[i+1]) {
				return i
			}
		case ' ', '\t':
			if i+1 < len(line) && line[i+1] != ':' {
				return -1
			}
		}
	}
	return -1
}

// scan walks the line once: trigger literals through the prefilter, and
// runs of base64.
func (c *lineCtx) scan() {
	r, line := c.r, c.line
	n := len(line)
	// One run over all base64 and base64url bytes; the (rare) long ones
	// are split into their base64 and base64url runs afterwards.
	runStart := -1
	nameDone := 0
	for i := 0; i < n; i++ {
		b := line[i]
		if r.cls[b] != 0 {
			if runStart < 0 {
				runStart = i
			}
		} else if runStart >= 0 {
			if i-runStart >= minKeyRun {
				c.splitRun(runStart, i)
			}
			runStart = -1
		}
		if i+1 == n {
			break
		}
		k := r.pairs[uint16(r.lower[b])<<8|uint16(r.lower[line[i+1]])]
		if k == 0 {
			continue
		}
		bk := &r.buckets[k-1]
		if i+2 < n && !bk.admits(r.lower[line[i+2]]) {
			continue
		}
		for _, ti := range bk.triggers {
			t := &r.triggers[ti]
			if !hasPrefixFold(line[i:], t.lit) {
				continue
			}
			if t.kind == tName {
				if i >= nameDone {
					nameDone = c.name(i, len(t.lit))
				}
				continue
			}
			c.hit(t, i)
		}
	}
	if runStart >= 0 && n-runStart >= minKeyRun {
		c.splitRun(runStart, n)
	}
}

// splitRun finds in a long run of base64 and base64url bytes its base64
// runs (no - or _) and, when it has - or _, the base64url run.
func (c *lineCtx) splitRun(from, to int) {
	cls := &c.r.cls
	start, url := from, false
	for i := from; i <= to; i++ {
		if i < to && cls[c.line[i]] != clsURL {
			url = url || cls[c.line[i]] == clsURL
			continue
		}
		if i < to {
			url = true
		}
		if i-start >= minKeyRun {
			c.endRun(start, i, false)
		}
		start = i + 1
	}
	if url {
		c.endRun(from, to, true)
	}
}

func (c *lineCtx) endRun(from, to int, url bool) {
	need := minKeyRun
	if url {
		need = minURLKeyRun
	}
	if to-from < need {
		return
	}
	for k := 0; k < 2 && to < len(c.line) && c.line[to] == '='; k++ {
		to++
	}
	c.runs = append(c.runs, run{from: from, to: to, url: url})
}

func (c *lineCtx) hit(t *trigger, i int) {
	line := c.line
	switch t.kind {
	case tFormat:
		if i < c.done[doneFormat] {
			return // inside a token already found
		}
		if from, to := c.r.formats[t.idx].match(line, i); to > 0 {
			c.add(from, to, to == len(line))
			c.done[doneFormat] = to
		}
	case tScheme:
		c.authCredential(i, len(t.lit))
	case tURL:
		if i >= c.done[doneURL] {
			c.done[doneURL] = c.userinfo(i)
		}
	case tDSN:
		c.dsnAt(i)
		c.done[doneDSN] = i
	case tFlag:
		if f := &c.r.flags[t.idx]; bytes.HasPrefix(line[i:], []byte(f.flag)) {
			c.cmdValue(f, i)
		}
	case tPEMBegin:
		if i >= c.done[donePEM] {
			c.done[donePEM] = c.pemBegin(i)
		}
	case tPEMEnd:
		// An END that closes a block begun on earlier lines (a one-line
		// block has its BEGIN before it).
		if !c.hasEnd && !c.beginBefore(i) {
			if _, kind := c.r.pemEnd(line, i); kind == pemSecret {
				c.hasEnd = true
			}
		}
	case tB64PEM:
		if i >= c.done[doneB64PEM] && bytes.HasPrefix(line[i:], []byte("LS0tLS1CRUdJTi")) {
			c.done[doneB64PEM] = c.base64PEM(i)
		}
	case tPuTTY:
		c.puttyPrivate(i)
	}
}

// runRule masks the last field of a line that continues key material: a
// base64 field after a prefix of the same shape as the previous line's.
func (c *lineCtx) runRule() {
	st := c.st
	if !st.keyRun && !c.keyMaterial {
		return // nearly every line: nothing to look at
	}
	f := lastField(c.line)
	f.shape = shapeOf(c.line[:f.from])
	if st.keyRun && !c.keyMaterial && !c.hasEnd && f.b64 && f.to-f.from >= 8 && !plainWord(c.line[f.from:f.to]) && f.shape == st.keyShape {
		c.add(f.from, f.to, false)
		c.keyMaterial = true
	}
	st.keyRun = c.keyMaterial && !c.pemClosed && st.pem == pemNone
	st.keyShape = f.shape
}

// pgpass masks the password of a .pgpass line, "host:port:db:user:password"
// (':' inside a field is escaped as "\:"; the password may hold spaces).
func (c *lineCtx) pgpass() {
	line := c.line[c.base:]
	// Cheap tests first: this runs on every line. The host field ends at a
	// ':' before any space.
	colon := 0
	for colon < len(line) && line[colon] != ':' && line[colon] != ' ' && line[colon] != '\t' {
		colon++
	}
	if len(line) < 9 || line[0] == '#' || colon == 0 || colon == len(line) || line[colon] != ':' || bytes.Count(line, []byte(":")) < 4 {
		return
	}
	var starts [5]int
	n := 1
	for i := 0; i < len(line) && n < len(starts); i++ {
		switch line[i] {
		case '\\':
			i++
		case ':':
			starts[n] = i + 1
			n++
		case ' ', '\t':
			return // the first four fields have no spaces
		}
	}
	if n != 5 || starts[1] == 1 {
		return
	}
	port := line[starts[1] : starts[2]-1]
	if !(string(port) == "*" || (allDigits(port) && len(port) <= 5)) {
		return
	}
	hexPairs := 0
	for k := 0; k < 4; k++ {
		f := line[starts[k] : starts[k+1]-1]
		if len(f) == 2 && isHex(f[0]) && isHex(f[1]) {
			hexPairs++
		}
	}
	if hexPairs >= 3 {
		return // a MAC address
	}
	c.add(c.base+starts[4], c.base+len(bytes.TrimRight(line, " \t\r")), false)
}

func isHex(b byte) bool {
	return ('0' <= b && b <= '9') || ('a' <= b && b <= 'f') || ('A' <= b && b <= 'F')
}

// below reports a line that may continue what a line with the given log
// prefix opened: one with the same prefix length, or a journal
// continuation line (no prefix, indented to the message).
func (c *lineCtx) below() bool { return c.base == c.st.stateBase || c.base == 0 }

// col is the column where the line's text starts, after its log prefix and
// indentation. Depths are columns too, so that a message's continuation
// lines (which journalctl indents to the message's column) compare right.
func (c *lineCtx) col() int { return c.base + indent(c.line[c.base:]) }

// logPrefix returns the length of a syslog ("Jun 12 10:00:01 host tag[pid]: ")
// or journal ("2024-06-12T10:00:01.123456+0000 host tag[pid]: ") prefix at
// the start of line, or 0.
func logPrefix(line []byte) int {
	digit := func(i int) bool { return i < len(line) && '0' <= line[i] && line[i] <= '9' }
	p := 0
	switch {
	case len(line) > 16 && classOf(line[0]) == clsUpper && classOf(line[1]) == clsLower && classOf(line[2]) == clsLower &&
		line[3] == ' ' && (line[4] == ' ' || digit(4)) && digit(5) && line[6] == ' ' && digit(7) && digit(8) && line[9] == ':':
		p = 15
	case len(line) > 20 && digit(0) && digit(3) && line[4] == '-' && line[7] == '-' && line[10] == 'T' && line[13] == ':':
		p = 19
		for p < len(line) && line[p] != ' ' && p < 40 {
			p++
		}
	default:
		return 0
	}
	if p >= len(line) || line[p] != ' ' {
		return 0
	}
	p++
	h := bytes.IndexByte(line[p:min(len(line), p+256)], ' ')
	if h <= 0 {
		return 0
	}
	p += h + 1
	t := bytes.Index(line[p:min(len(line), p+128)], []byte(": "))
	if t <= 0 || bytes.IndexByte(line[p:p+t], ' ') >= 0 {
		return 0
	}
	return p + t + 2
}

var lowerTable = func() (t [256]byte) {
	for i := range t {
		t[i] = lowerByte(byte(i))
	}
	return t
}()

func hasPrefixFold(s []byte, lit string) bool {
	if len(s) < len(lit) {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if lowerTable[s[i]] != lit[i] {
			return false
		}
	}
	return true
}

// apply appends text[from:to] with the spans (merged where they overlap)
// replaced by Mask.
func (c *lineCtx) apply(dst []byte, from, to int, last bool) ([]byte, int, lineInfo) {
	line, spans := c.line, c.spans
	info := lineInfo{hasEnd: c.hasEnd}
	for i := range spans {
		if !last && spans[i].eol && spans[i].to >= len(line) {
			c.st.restOfLine = true
		}
		// Spans never take the whitespace around a secret: a mask must
		// not join two words into one name that a second pass would read
		// differently.
		for spans[i].from < spans[i].to && isSpace(line[spans[i].from]) {
			spans[i].from++
		}
		for spans[i].to > spans[i].from && isSpace(line[spans[i].to-1]) {
			spans[i].to--
		}
		spans[i].from = max(spans[i].from, from)
		spans[i].to = min(spans[i].to, to)
	}
	if len(spans) > 1 {
		slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	}
	n, pos := 0, from
	for i := 0; i < len(spans); {
		sp := spans[i]
		for i++; i < len(spans) && spans[i].from <= sp.to; i++ {
			sp.to = max(sp.to, spans[i].to)
		}
		sp.from = max(sp.from, pos)
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
	return append(dst, line[pos:to]...), n, info
}
