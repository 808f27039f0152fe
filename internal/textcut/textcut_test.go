package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadCutsOnCharacterBoundaries(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{"abcdef", 3, "abc"},
		{"ab\u00e9cd", 3, "ab"}, // é is two bytes: not split
		{"\u00e9", 0, ""},
		{"abc", -1, ""},
	} {
		if got := Head(c.in, c.n); got != c.want {
			t.Errorf("Head(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if got := string(Head([]byte(c.in), c.n)); got != c.want {
			t.Errorf("Head([]byte %q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestEllipsisStaysWithinTheLimit(t *testing.T) {
	if got := Ellipsis("fits", 4); got != "fits" {
		t.Fatalf("Ellipsis kept %q", got)
	}
	if got := Ellipsis("abcdefgh", 7); got != "abcd..." {
		t.Fatalf("Ellipsis = %q, want abcd...", got)
	}
	long := strings.Repeat("\u00e9", 100)
	for n := 3; n < 40; n++ {
		got := Ellipsis(long, n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, Mark) {
			t.Fatalf("Ellipsis(é×100, %d) = %q: over the limit, invalid or unmarked", n, got)
		}
	}
}
