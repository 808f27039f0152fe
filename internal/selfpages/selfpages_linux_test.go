package selfpages

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// residentKiB sums the resident size of this process's mappings of exe
// (/proc/self/smaps).
func residentKiB(t *testing.T, exe string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	kib, in := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) >= 6 && f[5] == exe
		case in && len(f) == 3 && f[0] == "Rss:":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			kib += n
		}
	}
	return kib
}

// The test binary's resident file pages go (most of them: what runs next
// comes back), and the program goes on running the code it paged out.
func TestReleaseExecutableShrinksTheResidentFilePages(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := residentKiB(t, exe)
	advised, err := ReleaseExecutable()
	if err == ErrUnsupported {
		t.Fatalf("%v: nodemend needs Linux 5.4 or later for this", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := residentKiB(t, exe)
	fi, _ := os.Stat(exe)
	t.Logf("advised %d KiB of a %d KiB executable; resident %d → %d KiB", advised>>10, fi.Size()>>10, before, after)
	if advised < fi.Size()/2 {
		t.Errorf("advised %d bytes of a %d-byte executable: its mappings were not all found", advised, fi.Size())
	}
	if before == 0 || after*2 > before {
		t.Errorf("the executable's resident pages %d → %d KiB: not halved", before, after)
	}
	if got := strings.Repeat("ab", 3); got != "ababab" {
		t.Errorf("code paged out runs wrong: %q", got)
	}
}
