package redact

import "bytes"

// A name (variable, key, flag, header, XML element) is judged by its whole
// parts: it is split on "_ - ." and every other non-alphanumeric byte, on
// camelCase boundaries and between letters and digits, and each part is
// compared with the secret words. "VAULT_AUTH_TOKEN", "signingKey",
// "X-Auth-Token" and "oauth2ClientSecret" are secret; "KEYBOARD_LAYOUT",
// "SIGTERM" and "MONKEY" are not, because no whole part is a secret word.

// wordMatch says how a part must relate to a secret word.
type wordMatch uint8

const (
	// matchExact: the part is the word ("key" in API_KEY, not in MONKEY).
	matchExact wordMatch = iota
	// matchSuffix: the part is the word or ends with it ("accesstoken",
	// "clientsecret", "oauth").
	matchSuffix
	// matchContains: the part contains the word ("chpasswd", "passwords").
	matchContains
)

type secretWord struct {
	word  string // lower case
	match wordMatch
}

// secretWords are the words whose presence as a whole part makes a name
// secret. Every entry has its own case in the tests, and a test removes each
// entry in turn to check that some case then fails.
func secretWords() []secretWord {
	return []secretWord{
		// Words that are secret wherever they stand in a part: nothing
		// innocent contains them.
		{"passw", matchContains}, // password, passwd, passwort, chpasswd
		{"credential", matchContains},
		// Words that end a compound part: accesstoken, clientsecret, oauth.
		{"token", matchSuffix},
		{"secret", matchSuffix},
		{"auth", matchSuffix},
		{"dsn", matchSuffix},
		{"passphrase", matchSuffix},
		{"pwd", matchSuffix},
		{"signature", matchSuffix},
		{"sessid", matchSuffix},    // PHPSESSID
		{"sessionid", matchSuffix}, // JSESSIONID
		// Words that are secret only as a whole part: "key" but not
		// "monkey", "sig" but not "sigterm".
		{"key", matchExact},
		{"pass", matchExact},
		{"pw", matchExact},
		{"sig", matchExact},
		{"signing", matchExact},
		{"session", matchExact},
		{"cookie", matchExact},
		{"private", matchExact},
		{"authorization", matchExact},
		{"secrets", matchExact},
		{"creds", matchExact},
		{"cred", matchExact},
		{"otp", matchExact},
		{"jwt", matchExact},
		{"bearer", matchExact},
		{"sas", matchExact},
		{"psk", matchExact}, // wpa_supplicant, ipsec.secrets
		// An SSM hybrid activation (nodeadm's spec.hybrid.ssm.activationCode
		// and activationId) registers any machine as the node's instance.
		{"activation", matchExact},
		// Compounds written as one word.
		{"apikey", matchExact},
		{"accesskey", matchExact},
		{"secretkey", matchExact},
		{"privatekey", matchExact},
		{"privkey", matchExact},
		{"authkey", matchExact},
		{"signingkey", matchExact},
		{"sessionkey", matchExact},
		{"masterkey", matchExact},
		{"encryptionkey", matchExact},
		{"clientkey", matchExact},
		{"accountkey", matchExact},
		{"sharedkey", matchExact},
		{"licensekey", matchExact},
		{"requirepass", matchExact}, // redis.conf
		{"dockerconfigjson", matchExact},
		{"dockercfg", matchExact},
		{"connectionstring", matchExact},
		{"connstr", matchExact},
	}
}

// qualifierWords, as the last part of a secret name, make it the name of
// something about a secret rather than the secret itself: a path to it
// (--tls-private-key-file), its kind (authorization-mode, XDG_SESSION_TYPE),
// its size. Such a name keeps its value only when the value is harmless (a
// path, a number, a duration, a plain word); anything else is masked.
func qualifierWords() []string {
	return []string{
		"file", "files", "path", "paths", "dir", "mode", "type", "enabled", "size",
		"bits", "algorithm", "alg", "config", "policy", "model", "name", "stdin", "lines",
	}
}

// publicWords mark public material: "ssh_public_key", "PublicKeyToken".
// A name with one of them is not secret unless it also has a strong secret
// part ("public_private_key" is).
func publicWords() []string { return []string{"public", "pub"} }

// strongWords keep a name secret even next to a public word.
func strongWords() []string { return []string{"private", "secret", "passw"} }

// exemptName is a whole name that is secret by its parts but, in common use,
// names something else; its value is kept when keep says it is that thing.
type exemptName struct {
	name string // lower case, the whole name
	keep func(v []byte) bool
}

func exemptNames() []exemptName {
	return []exemptName{
		// The shell's working directory, in every process environment.
		{"pwd", isPath},
		{"oldpwd", isPath},
		// A taint's or toleration's key: "key: node.kubernetes.io/unreachable".
		{"key", isLabelKey},
		// nsswitch.conf: "passwd: files systemd".
		{"passwd", isNSSwitchSources},
	}
}

// verdict is what a name says about its value.
type verdict uint8

const (
	notSecret verdict = iota
	secretValue
	// qualified: masked unless harmless (see qualifierWords).
	qualified
)

// nameRules holds the word lists in the form the judge uses.
type nameRules struct {
	words      []secretWord
	qualifiers []string
	public     []string
	strong     []string
	exempt     []exemptName

	// compiled from words by compile: lookups without conversions.
	exact    map[string]bool
	suffix   [][]byte
	contains [][]byte
	strongB  [][]byte
}

// trimNamePunct trims the dashes, underscores and dots around a name.
func trimNamePunct(b []byte) []byte {
	for len(b) > 0 && (b[0] == '-' || b[0] == '_' || b[0] == '.') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == '-' || b[len(b)-1] == '_' || b[len(b)-1] == '.') {
		b = b[:len(b)-1]
	}
	return b
}

// compile prepares the lists for judge.
func (n *nameRules) compile() {
	n.exact = map[string]bool{}
	n.suffix, n.contains, n.strongB = nil, nil, nil
	for _, s := range n.strong {
		n.strongB = append(n.strongB, []byte(s))
	}
	for _, w := range n.words {
		switch w.match {
		case matchExact:
			n.exact[w.word] = true
		case matchSuffix:
			n.suffix = append(n.suffix, []byte(w.word))
		default:
			n.contains = append(n.contains, []byte(w.word))
		}
	}
}

// isSecretPart reports a part that is a secret word.
func (n *nameRules) isSecretPart(part []byte) bool {
	if n.exact[string(part)] {
		return true
	}
	for _, w := range n.suffix {
		if bytes.HasSuffix(part, w) {
			return true
		}
	}
	for _, w := range n.contains {
		if bytes.Contains(part, w) {
			return true
		}
	}
	return false
}

func defaultNameRules() nameRules {
	return nameRules{words: secretWords(), qualifiers: qualifierWords(), public: publicWords(), strong: strongWords(), exempt: exemptNames()}
}

// maxParts bounds the parts looked at in one name (a name is rarely longer;
// a pathological one is judged by its first parts and its last).
const maxParts = 24

// judgement is what a name says about its value.
type judgement struct {
	v verdict
	// keep tells a qualified name's harmless value.
	keep func([]byte) bool
	// header: the last part is authorization or cookie, whose value is a
	// whole header line.
	header bool
}

// judge returns what name says about its value.
func (n *nameRules) judge(name []byte) judgement {
	var buf [128]byte
	var parts [maxParts + 1][2]int
	np := splitParts(name, &buf, &parts)
	lower := buf[:min(len(name), len(buf))]
	var secret bool
	var last []byte
	for k := 0; k < np; k++ {
		part := lower[parts[k][0]:parts[k][1]]
		if classOf(part[0]) != clsDigit {
			last = part // a version number is not the last word: File-3
		}
		if !secret && n.isSecretPart(part) {
			secret = true
		}
	}
	if !secret {
		return judgement{}
	}
	var public, strong bool
	for k := 0; k < np; k++ {
		part := lower[parts[k][0]:parts[k][1]]
		for _, p := range n.public {
			if string(part) == p {
				public = true
			}
		}
		for _, s := range n.strongB {
			if bytes.Contains(part, s) {
				strong = true
			}
		}
	}
	if public && !strong {
		return judgement{}
	}
	j := judgement{v: secretValue, header: string(last) == "authorization" || string(last) == "cookie"}
	trimmed := trimNamePunct(lower)
	for _, e := range n.exempt {
		if string(trimmed) == e.name {
			j.v, j.keep = qualified, e.keep
			return j
		}
	}
	for _, q := range n.qualifiers {
		if string(last) == q {
			j.v, j.keep = qualified, isHarmless
			return j
		}
	}
	return j
}

// splitParts lower-cases name into buf and returns the bounds of its whole
// parts: split on every non-alphanumeric byte, on camelCase boundaries
// ("signingKey"), at the end of an acronym ("APIKey") and between letters
// and digits ("oauth2Token"). Past maxParts, the last part found is kept in
// the last slot.
func splitParts(name []byte, buf *[128]byte, parts *[maxParts + 1][2]int) int {
	n := min(len(name), len(buf))
	np, start := 0, -1
	flush := func(end int) {
		if start >= 0 && end > start {
			if np == len(parts) {
				np--
			}
			parts[np] = [2]int{start, end}
			np++
		}
		start = -1
	}
	prev := uint8(clsOther)
	for i := 0; i < n; i++ {
		c := name[i]
		buf[i] = lowerTable[c]
		cl := charClass[c]
		if cl == clsOther {
			flush(i)
			prev = cl
			continue
		}
		if start >= 0 {
			switch {
			case (prev == clsDigit) != (cl == clsDigit), prev == clsLower && cl == clsUpper,
				prev == clsUpper && cl == clsUpper && i+1 < n && charClass[name[i+1]] == clsLower:
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
		prev = cl
	}
	flush(n)
	return np
}

var charClass = func() (t [256]uint8) {
	for i := range t {
		t[i] = uint8(classOf(byte(i)))
	}
	return t
}()

const (
	clsOther = iota
	clsLower
	clsUpper
	clsDigit
)

func classOf(c byte) int {
	switch {
	case 'a' <= c && c <= 'z':
		return clsLower
	case 'A' <= c && c <= 'Z':
		return clsUpper
	case '0' <= c && c <= '9':
		return clsDigit
	}
	return clsOther
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// isNameByte reports a byte that can be part of a name.
func isNameByte(b byte) bool {
	return b == '_' || b == '-' || b == '.' || classOf(b) != clsOther
}
