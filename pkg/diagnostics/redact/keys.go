package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
)

// Key material is found three ways: by its armour (PEM, OpenSSH, PuTTY and
// SSH2 blocks, also base64-encoded and on one line), by its shape when the
// armour is not in the window (a run of base64 that is random, not a word,
// a path or an identifier), and by position: a short base64 line that
// follows key material, or that precedes the END line of a private block,
// is the block's last line.

// minKeyRun is the shortest base64 run taken for key material without any
// other sign: PEM lines are 64 characters, OpenSSH 70, MIME 76, an AWS
// secret access key 40.
const minKeyRun = 40

// minURLKeyRun is the same for base64url (with - and _), which identifiers
// and names also use: only long and random runs count.
const minURLKeyRun = 64

// publicPEMLabels are the PEM block labels whose body is public and stays
// readable. Every other label (any PRIVATE KEY, ENCRYPTED, unknown ones) is
// masked: fail closed.
func publicPEMLabels() []string {
	return []string{
		"CERTIFICATE", "TRUSTED CERTIFICATE", "X509 CRL", "CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST",
		"PUBLIC KEY", "RSA PUBLIC KEY", "SSH2 PUBLIC KEY", "PGP PUBLIC KEY BLOCK", "PGP SIGNATURE",
		"DH PARAMETERS", "EC PARAMETERS", "PKCS7", "CMS", "PGP SIGNED MESSAGE",
	}
}

// pemKind is what kind of block the state is in.
type pemKind uint8

const (
	pemNone pemKind = iota
	pemSecret
	pemPublic
)

// pemMaxLines bounds a block: a block whose END never comes (a cut file)
// must not swallow the rest of it. An 8192-bit RSA key is about 100 lines.
const pemMaxLines = 400

// pemHeader finds a BEGIN line's label at line[i:] ("-----BEGIN X-----" or
// the SSH2 form "---- BEGIN X ----"); ok is false when it is not one.
func pemHeader(line []byte, i int) (label []byte, end int, ok bool) {
	rest := line[i:]
	var open, close string
	switch {
	case bytes.HasPrefix(rest, []byte("-----BEGIN ")):
		open, close = "-----BEGIN ", "-----"
	case bytes.HasPrefix(rest, []byte("---- BEGIN ")):
		open, close = "---- BEGIN ", " ----"
	default:
		return nil, 0, false
	}
	p := len(open)
	// Labels are upper case words, but not always: "OpenVPN Static key V1".
	for p < len(rest) && (rest[p] == ' ' || classOf(rest[p]) != clsOther) {
		p++
	}
	if close == " ----" {
		// The label ran into the closing " ----": step back over the space.
		if p > len(open) && rest[p-1] == ' ' && bytes.HasPrefix(rest[p-1:], []byte(close)) {
			label = bytes.TrimSpace(rest[len(open) : p-1])
			return label, i + p - 1 + len(close), len(label) > 0
		}
		return nil, 0, false
	}
	if !bytes.HasPrefix(rest[p:], []byte(close)) || p == len(open) {
		return nil, 0, false
	}
	return rest[len(open):p], i + p + len(close), true
}

func (r *Redactor) pemKindOf(label []byte) pemKind {
	for _, l := range r.pemPublic {
		if string(label) == l {
			return pemPublic
		}
	}
	return pemSecret
}

// pemEnd finds an END marker in line at or after from: its start, and
// whether it closes a secret block.
func (r *Redactor) pemEnd(line []byte, from int) (at int, kind pemKind) {
	return r.pemEndOf(line, from, "-----END ", "---- END ")
}

// pemEndOf is pemEnd for the given END markers.
func (r *Redactor) pemEndOf(line []byte, from int, markers ...string) (at int, kind pemKind) {
	for _, m := range markers {
		if i := bytes.Index(line[from:], []byte(m)); i >= 0 {
			at = from + i
			l := line[at+len(m):]
			e := 0
			for e < len(l) && (l[e] == ' ' || classOf(l[e]) != clsOther) {
				e++
			}
			return at, r.pemKindOf(bytes.TrimSpace(l[:e]))
		}
	}
	return -1, pemNone
}

// pemBegin masks a BEGIN line found at i and what follows it on the line:
// the body up to an END on the same line (one-line JSON "\n" form), or to
// the end of the line, in which case the block continues on the next lines.
// It returns where what it looked at ends.
func (c *lineCtx) pemBegin(i int) int {
	label, end, ok := pemHeader(c.line, i)
	if !ok {
		return i + 1
	}
	kind := c.r.pemKindOf(label)
	// The header is no key material, whatever runs into it: masking it
	// would lose the block for a second pass.
	c.publicRun = append(c.publicRun, span{from: i, to: end})
	endMarker := "-----END "
	if c.line[i+1] == '-' && c.line[i+4] == ' ' {
		endMarker = "---- END " // the SSH2 form
	}
	if at, _ := c.r.pemEndOf(c.line, end, endMarker); at >= 0 {
		if kind == pemSecret {
			c.add(end, at, false)
			c.keyMaterial = true
		}
		return at
	}
	if kind == pemSecret {
		c.add(end, len(c.line), true)
		c.keyMaterial = true
	}
	c.st.pem, c.st.pemLeft, c.st.pemShape = kind, pemMaxLines, shapeOf(c.line[:i])
	return len(c.line) // no END after it on the line: no later BEGIN has one either
}

// inPEM handles a line inside a block; done is false when the line is not
// a body line (it is then processed as any line, with its base64 masked
// while the block is a secret one).
func (c *lineCtx) inPEM() (done bool) {
	st, line := c.st, c.line
	if at, _ := c.r.pemEnd(line, 0); at >= 0 {
		if st.pem == pemSecret {
			c.add(c.base, at, false)
			c.keyMaterial = true
		}
		st.pem = pemNone
		c.pemClosed = true
		return true
	}
	st.pemLeft--
	if st.pemLeft <= 0 {
		st.pem = pemNone
		return false
	}
	if len(bytes.TrimSpace(line)) == 0 || c.r.pemHeaderLine(line) {
		return true // "Proc-Type: 4,ENCRYPTED", "DEK-Info: ...": not secret
	}
	// A body line: base64 alone, after the same prefix as the BEGIN line's
	// (indentation, a log line's timestamp and process).
	if f := lastField(line); f.b64 && shapeOf(line[:f.from]) == st.pemShape {
		if st.pem == pemSecret {
			c.add(f.from, f.to, false)
			c.keyMaterial = true
		}
		return true
	}
	if st.pem == pemPublic {
		st.pem = pemNone
		return false
	}
	// Not a plain body line (a JSON journal record, a quoted line): mask
	// every base64 piece of it; a line with none ends the block.
	masked := false
	for _, rn := range b64Runs(line, 8) {
		if insideMask(line, rn.from, rn.to) {
			masked = true // masked by an earlier pass
			continue
		}
		if !plainWord(line[rn.from:rn.to]) {
			c.add(rn.from, rn.to, false)
			masked = true
		}
	}
	if !masked {
		st.pem = pemNone
	} else {
		c.keyMaterial = true
	}
	return false
}

// insideMask reports the "REDACTED" of a Mask.
func insideMask(line []byte, from, to int) bool {
	return from > 0 && to < len(line) && line[from-1] == '[' && line[to] == ']' && string(line[from:to]) == Mask[1:len(Mask)-1]
}

// pemHeaders name the header lines a private block may have between its
// BEGIN line and its body (RFC 1421's encrypted PEM, RFC 4716's SSH2 keys,
// OpenPGP armour): they stay readable, and the block goes on after them.
// Another line that is no body line ends the block's state; its body is
// then still found by its shape.
func pemHeaders() []string { return []string{"Proc-Type:", "DEK-Info:", "Comment:", "Version:"} }

// sshKeyTypes start the key type names of SSH public key blobs (ssh-rsa,
// ssh-ed25519, ecdsa-sha2-nistp256, sk-ssh-ed25519@openssh.com).
func sshKeyTypes() []string { return []string{"ssh-", "ecdsa-", "sk-"} }

func (r *Redactor) pemHeaderLine(line []byte) bool {
	t := bytes.TrimSpace(line)
	for _, h := range r.pemHeaders {
		if bytes.HasPrefix(t, []byte(h)) {
			return true
		}
	}
	return false
}

// puttyPrivate handles "Private-Lines: N" of a PuTTY key file: the next N
// lines are the private blob.
func (c *lineCtx) puttyPrivate(i int) {
	rest := c.line[i+len("private-lines:"):]
	n := 0
	for _, b := range bytes.TrimSpace(rest) {
		if b < '0' || b > '9' || n > 1000 {
			break
		}
		n = n*10 + int(b-'0')
	}
	if n > 0 {
		c.st.ppkLeft = min(n, 1000)
	}
}

// base64PEM looks at a base64 run starting with base64("-----BEGIN"): it is
// masked unless it decodes to a public block. It returns the run's end.
func (c *lineCtx) base64PEM(i int) int {
	end := i
	for end < len(c.line) && isBase64(c.line[end]) {
		end++
	}
	head := c.line[i:min(end, i+96)]
	head = head[:len(head)/4*4]
	var dec [72]byte
	n, _ := base64.StdEncoding.Decode(dec[:], head)
	if label, _, ok := pemHeader(dec[:n], 0); ok && c.r.pemKindOf(label) == pemPublic {
		c.publicRun = append(c.publicRun, span{from: i, to: end})
		return end
	}
	c.add(i, end, false)
	c.keyMaterial = true
	return end
}

func isBase64(b byte) bool {
	return b == '+' || b == '/' || b == '=' || classOf(b) != clsOther
}

// keyRuns masks the runs of base64 that are key material by their shape.
func (c *lineCtx) keyRuns() {
	for _, rn := range c.runs {
		if c.covered(rn) {
			continue
		}
		if s := c.line[rn.from:rn.to]; isKeyMaterial(s, rn.url) && (rn.url || !c.r.sshPublicBlob(s)) {
			c.add(rn.from, rn.to, false)
			c.keyMaterial = true
		}
	}
}

// covered reports a run that overlaps text known to be public (a PEM
// header, a certificate's base64).
func (c *lineCtx) covered(rn run) bool {
	for _, sp := range c.publicRun {
		if rn.from < sp.to && sp.from < rn.to {
			return true
		}
	}
	return false
}

// run is a maximal run of base64 (or base64url) bytes.
type run struct {
	from, to int
	url      bool
}

// isKeyMaterial reports whether a base64 run looks like random bytes rather
// than a word, an identifier or a path. Random base64 mixes upper case,
// lower case and digits (or + and /); identifiers are made of words.
func isKeyMaterial(s []byte, url bool) bool {
	var upper, lower, digit, sym, seps, slashes int
	for _, b := range s {
		switch {
		case 'A' <= b && b <= 'Z':
			upper++
		case 'a' <= b && b <= 'z':
			lower++
		case '0' <= b && b <= '9':
			digit++
		case b == '-' || b == '_':
			seps++
		case b == '/':
			slashes++
			sym++
		case b == '+':
			sym++
		}
	}
	if upper == 0 || lower == 0 || digit+sym == 0 {
		return false
	}
	if url {
		// Identifiers join words with - and _; random base64url has them
		// at 1 in 32.
		return seps*100 < len(s)*8 && wordiness(s) < 0.3
	}
	if wordiness(s) >= 0.7 {
		return false // CamelCaseIdentifierNames
	}
	return slashes < 2 || !pathLike(s)
}

// wordiness is the share of s in runs that read as words: an optional
// capital, then three or more lower-case letters.
func wordiness(s []byte) float64 {
	n, i := 0, 0
	for i < len(s) {
		j := i
		if 'A' <= s[j] && s[j] <= 'Z' {
			j++
		}
		k := j
		for k < len(s) && 'a' <= s[k] && s[k] <= 'z' {
			k++
		}
		if k-j >= 3 {
			n += k - i
			i = k
			continue
		}
		i++
	}
	return float64(n) / float64(len(s))
}

// pathLike reports a run whose slash-separated segments are mostly words:
// "/usr/lib/Something/More".
func pathLike(s []byte) bool {
	wordy := 0
	for _, seg := range bytes.Split(s, []byte("/")) {
		if len(seg) >= 2 && wordiness(seg) >= 0.8 {
			wordy += len(seg)
		}
	}
	return wordy*10 >= len(s)*6
}

// sshPublicBlob reports the base64 of an SSH public key blob ("AAAAB3NzaC1yc2E..."):
// a length-prefixed key type name. OpenSSH private keys start otherwise
// ("b3BlbnNzaC1rZXktdjE", openssh-key-v1).
func (r *Redactor) sshPublicBlob(s []byte) bool {
	if len(s) < 24 {
		return false
	}
	var dec [18]byte
	n, _ := base64.StdEncoding.Decode(dec[:], s[:24])
	if n < 8 {
		return false
	}
	l := binary.BigEndian.Uint32(dec[:4])
	if l < 7 || l > 64 {
		return false
	}
	name := dec[4:n]
	for _, p := range r.sshKeyTypes {
		if bytes.HasPrefix(name, []byte(p)) {
			return true
		}
	}
	return false
}

// b64Runs returns the runs of base64 bytes of at least min length.
func b64Runs(line []byte, min int) []span {
	var out []span
	start := -1
	for i := 0; i <= len(line); i++ {
		if i < len(line) && isBase64(line[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 && i-start >= min {
			out = append(out, span{from: start, to: i})
		}
		start = -1
	}
	return out
}

// plainWord reports an ordinary word ("Completed", "kubelet"): never key
// material on its own.
func plainWord(s []byte) bool {
	i := 0
	if i < len(s) && 'A' <= s[i] && s[i] <= 'Z' {
		i++
	}
	for ; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// field is the last whitespace-separated field of a line, without quotes,
// commas, escaped newlines and backslashes around it.
type field struct {
	from, to int
	b64      bool   // only base64 (or base64url) bytes
	std      bool   // only base64 bytes (a PEM body's)
	shape    uint64 // set by the caller that needs it: shapeOf(line[:from])
}

func lastField(line []byte) field {
	end := len(line)
	for end > 0 && (isSpace(line[end-1]) || line[end-1] == ',' || line[end-1] == '"' || line[end-1] == '\'' || line[end-1] == '\\') {
		end--
		if end >= 2 && line[end-1] == 'n' && line[end-2] == '\\' {
			end -= 2 // a JSON-escaped newline
		}
	}
	start := end
	for start > 0 && !isSpace(line[start-1]) && line[start-1] != '"' && line[start-1] != '\'' {
		start--
	}
	f := field{from: start, to: end, b64: end > start, std: end > start}
	pad := end
	for pad > start && line[pad-1] == '=' {
		pad--
	}
	for _, b := range line[start:pad] {
		// '=' only as padding: "NAME=value" is no base64.
		if (!isBase64(b) && b != '-' && b != '_') || b == '=' {
			f.b64, f.std = false, false
			break
		}
		if b == '-' || b == '_' {
			f.std = false
		}
	}
	return f
}

// shapeOf hashes a line's prefix with its digits made equal, so that the
// prefixes of consecutive log lines of one process (timestamps differ) have
// the same shape.
func shapeOf(prefix []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range prefix {
		if '0' <= b && b <= '9' {
			b = '0'
		}
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}
