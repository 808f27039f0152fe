package rootfs

import (
	"fmt"
	"slices"
	"testing"
)

// The one-line format: options in brackets (one field or several), signed-by
// kept, comments and blank lines skipped.
func TestParseOneLineSources(t *testing.T) {
	got, err := ParseSources("/etc/apt/sources.list", []byte(`# the main archive
deb http://mirror.example/debian bookworm main contrib
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm-updates main
deb [ signed-by=/etc/apt/keyrings/x.gpg ] https://vendor.example/apt stable main
deb-src http://mirror.example/debian bookworm main

deb http://security.example/debian-security bookworm-security main # security
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Source{
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main", "contrib"}},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm-updates"}, Components: []string{"main"}, SignedBy: "/usr/share/keyrings/debian-archive-keyring.gpg"},
		{Types: []string{"deb"}, URIs: []string{"https://vendor.example/apt"}, Suites: []string{"stable"}, Components: []string{"main"}, SignedBy: "/etc/apt/keyrings/x.gpg"},
		{Types: []string{"deb-src"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://security.example/debian-security"}, Suites: []string{"bookworm-security"}, Components: []string{"main"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
	if _, err := ParseSources("x.list", []byte("deb http://mirror.example/debian\n")); err == nil {
		t.Error("a line without a suite was accepted")
	}
}

// The deb822 format of Debian 12's default debian.sources: several
// suites per paragraph, comment lines, disabled paragraphs.
func TestParseDeb822Sources(t *testing.T) {
	got, err := ParseSources("/etc/apt/sources.list.d/debian.sources", []byte(`Types: deb
# a comment inside the paragraph
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Enabled: no
Types: deb
URIs: http://old.example/debian
Suites: bullseye
Components: main
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got[0].Suites, []string{"bookworm", "bookworm-updates"}) || !slices.Equal(got[1].Types, []string{"deb", "deb-src"}) {
		t.Errorf("got %v", got)
	}
	if _, err := ParseSources("x.sources", []byte("Types: deb\nURIs: http://mirror.example/debian\n")); err == nil {
		t.Error("a paragraph without Suites was accepted")
	}
}

// Only the release's binary sources of the main component reach the
// build; rendering and parsing again gives the same sources.
func TestForReleaseAndDeb822(t *testing.T) {
	in := []Source{
		{Types: []string{"deb", "deb-src"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm", "bookworm-updates", "trixie"}, Components: []string{"main", "contrib"}, SignedBy: "/k.gpg"},
		{Types: []string{"deb-src"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://security.example/debian-security"}, Suites: []string{"bookworm-security"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"https://vendor.example/apt"}, Suites: []string{"stable"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"non-free"}},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm2"}, Components: []string{"main"}},
	}
	got := ForRelease(in, "bookworm")
	want := []Source{
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"}, SignedBy: "/k.gpg"},
		{Types: []string{"deb"}, URIs: []string{"http://security.example/debian-security"}, Suites: []string{"bookworm-security"}, Components: []string{"main"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	again, err := ParseSources("x.sources", []byte(Deb822(got)))
	if err != nil || fmt.Sprint(again) != fmt.Sprint(got) {
		t.Errorf("round trip: %v (%v)\n%s", again, err, Deb822(got))
	}
}

// From `apt-config dump`, proxies and the release-date checks pass through;
// the rest of apt's configuration does not.
func TestAcquireOptions(t *testing.T) {
	dump := []byte(`APT "";
APT::Architecture "amd64";
Acquire "";
Acquire::AllowInsecureRepositories "0";
Acquire::http "";
Acquire::http::Proxy "http://proxy.example:3128/";
Acquire::https::Proxy "";
Acquire::http::Proxy::vendor.example "DIRECT";
Acquire::Check-Valid-Until "false";
Acquire::Check-Date "false";
Acquire::Retries "3";
Dir::Etc "etc/apt";
`)
	got := AcquireOptions(dump)
	want := []string{
		`Acquire::http::Proxy "http://proxy.example:3128/";`,
		`Acquire::http::Proxy::vendor.example "DIRECT";`,
		`Acquire::Check-Valid-Until "false";`,
		`Acquire::Check-Date "false";`,
		`Acquire::Retries "3";`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
