package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	// The kernel's mangle(): \ooo for space, tab, newline and backslash;
	// anything else stays as written.
	for in, want := range map[string]string{
		`/mnt/a\040b`: "/mnt/a b", `/x\011y\012z\134w`: "/x\ty\nz\\w", `/plain`: "/plain", `/trail\04`: `/trail\04`, `/big\777`: `/big\777`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A line the collectors used to read leniently: the fields either side of
// the separator, the escaped point and source decoded.
func TestParseLine(t *testing.T) {
	e, err := ParseLine(`36 35 98:0 /mnt1 /mnt/a\040b rw,noatime master:1 - ext3 /dev/ro\040ot rw,errors=continue`)
	if err != nil || e.Point != "/mnt/a b" || e.FSType != "ext3" || e.Source != "/dev/ro ot" || e.Major != 98 ||
		len(e.MountOptions) != 2 || e.SuperOptions[1] != "errors=continue" {
		t.Errorf("ParseLine = %+v, %v", e, err)
	}
	if _, err := ParseLine("not a mountinfo line"); err == nil {
		t.Error("ParseLine accepted garbage")
	}
}
