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
}

func defaultNameRules() nameRules {
	return nameRules{words: secretWords(), qualifiers: qualifierWords(), public: publicWords(), strong: strongWords(), exempt: exemptNames()}
}

// maxParts bounds the parts looked at in one name (a name is rarely longer;
// a pathological one is judged by its first parts and its last).
const maxParts = 24

// judge returns what name says about its value, and, for an exempt name,
// the test its value must pass to be kept.
func (n *nameRules) judge(name []byte) (verdict, func([]byte) bool) {
	var buf [128]byte
	lname := buf[:0]
	for _, c := range name {
		if len(lname) == len(buf) {
			break
		}
		lname = append(lname, lowerByte(c))
	}
	trimmed := bytes.Trim(lname, "-_.")
	var secret, public, strong bool
	var lastBuf [64]byte
	last := lastBuf[:0]
	count := 0
	eachPart(name, func(part []byte) {
		count++
		if count > maxParts {
			if classOf(part[0]) != clsDigit {
				last = append(last[:0], part...)
			}
			return
		}
		if classOf(part[0]) != clsDigit {
			last = append(last[:0], part...) // a version number is not the last word: File-3
		}
		for _, w := range n.words {
			if w.matches(part) {
				secret = true
				break
			}
		}
		for _, p := range n.public {
			if string(part) == p {
				public = true
			}
		}
		for _, s := range n.strong {
			if bytes.Contains(part, []byte(s)) {
				strong = true
			}
		}
	})
	if !secret {
		return notSecret, nil
	}
	if public && !strong {
		return notSecret, nil
	}
	for _, e := range n.exempt {
		if string(trimmed) == e.name {
			return qualified, e.keep
		}
	}
	for _, q := range n.qualifiers {
		if string(last) == q {
			return qualified, isHarmless
		}
	}
	return secretValue, nil
}

func (w secretWord) matches(part []byte) bool {
	switch w.match {
	case matchExact:
		return string(part) == w.word
	case matchSuffix:
		return bytes.HasSuffix(part, []byte(w.word))
	default:
		return bytes.Contains(part, []byte(w.word))
	}
}

// eachPart calls f with every whole part of name, lower-cased (the slice is
// reused between calls).
func eachPart(name []byte, f func(part []byte)) {
	var buf [64]byte
	part := buf[:0]
	flush := func() {
		if len(part) > 0 {
			f(part)
			part = part[:0]
		}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		cl := classOf(c)
		if cl == clsOther {
			flush()
			continue
		}
		if i > 0 && len(part) > 0 {
			prev := classOf(name[i-1])
			switch {
			case (prev == clsDigit) != (cl == clsDigit):
				flush() // letters and digits: oauth2Token
			case prev == clsLower && cl == clsUpper:
				flush() // camelCase: signingKey
			case prev == clsUpper && cl == clsUpper && i+1 < len(name) && classOf(name[i+1]) == clsLower:
				flush() // an acronym ends: APIKey
			}
		}
		if len(part) < len(buf) {
			part = append(part, lowerByte(c))
		}
	}
	flush()
}

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
