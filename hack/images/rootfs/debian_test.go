package rootfs

import (
	"archive/tar"
	"strings"
	"testing"

	"nodemend.dev/nodemend/hack/images/imagebuild"
)

// Slimming keeps copyright files and drops the rest of the documentation,
// manual pages and translations; the last matching filter decides.
func TestSlimPaths(t *testing.T) {
	excluded := Excluder(SlimPaths)
	for name, want := range map[string]bool{
		"usr/share/doc/tcpdump/changelog.Debian.gz":    true,
		"usr/share/doc/tcpdump/copyright":              false,
		"usr/share/man/man8/tcpdump.8.gz":              true,
		"usr/share/locale/de/LC_MESSAGES/iptables.mo":  true,
		"usr/share/info/coreutils.info.gz":             true,
		"usr/share/zoneinfo/Europe/Berlin":             false,
		"usr/sbin/tcpdump":                             false,
		"usr/share/lintian/overrides/systemd":          true,
		"usr/share/doc-base/something":                 false,
		"usr/share/doc/libc6/examples/copyright.sh":    true,
		"usr/share/ca-certificates/mozilla/ISRG.crt":   false,
		"etc/dpkg/dpkg.cfg.d/99mmdebstrap":             false,
		"usr/share/doc/systemd/copyright-and-more.txt": true,
	} {
		if got := excluded(name); got != want {
			t.Errorf("%s: excluded %v, want %v", name, got, want)
		}
	}
}

// Files that describe the building machine stay out of the image; apt's
// empty lock files and partial directories, and package files, stay in.
func TestBuildMachineFile(t *testing.T) {
	for name, want := range map[string]bool{
		"etc/hostname":    true,
		"etc/hosts":       true,
		"etc/resolv.conf": true,
		"etc/apt/sources.list.d/0000debian.sources": true,
		"etc/apt/sources.list.d":                    false,
		"etc/apt/apt.conf.d/99mmdebstrap":           true,
		"etc/apt/apt.conf.d/70debconf":              false,
		"dev/null":                                  true,
		"dev":                                       false,
		"tmp/mmdebstrap.x":                          true,
		"tmp":                                       false,
		"var/log/dpkg.log":                          true,
		"var/log/apt/history.log":                   true,
		"var/log/apt/eipp.log.xz":                   true,
		"var/log/journal":                           false,
		"var/lib/apt/lists/lock":                    false,
		"var/lib/apt/lists/partial":                 false,
		"var/lib/apt/lists/mirror.example_dists_bookworm_InRelease": true,
		"var/cache/apt/pkgcache.bin":                                true,
		"var/cache/apt/archives":                                    false,
		"var/cache/apt/archives/partial":                            false,
		"var/cache/apt/archives/tcpdump_4.99.3-1_amd64.deb":         true,
		"var/cache/ldconfig/aux-cache":                              true,
		"var/cache/debconf/config.dat":                              false,
		"var/cache/debconf/config.dat-old":                          true,
		"var/lib/dpkg/status":                                       false,
		"var/lib/dpkg/status-old":                                   true,
		"etc/machine-id":                                            false,
		"usr/sbin/tcpdump":                                          false,
	} {
		if got := BuildMachineFile(name); got != want {
			t.Errorf("%s: build-machine file %v, want %v", name, got, want)
		}
	}
}

// The static base's own files: a CA bundle of every certificate in name
// order, newline-separated; passwd and group for its users; home
// directories owned by them; a sticky /tmp.
func TestStaticFiles(t *testing.T) {
	cert := func(name, pem string) imagebuild.Entry {
		return imagebuild.Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name}, Data: []byte(pem)}
	}
	files := StaticFiles([]imagebuild.Entry{
		cert("usr/share/ca-certificates/mozilla/B.crt", "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----"),
		cert("usr/share/ca-certificates/mozilla/A.crt", "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"),
		cert("usr/share/doc/ca-certificates/copyright", "not a cert"),
	}, []User{
		{Name: "root", UID: 0, GID: 0, Home: "/root"},
		{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"},
		{Name: "nonroot", UID: 65532, GID: 65532, Home: "/home/nonroot"},
	})
	byPath := map[string]imagebuild.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	bundle := string(byPath["/etc/ssl/certs/ca-certificates.crt"].Data)
	if want := "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n"; bundle != want {
		t.Errorf("bundle %q, want %q", bundle, want)
	}
	if got := string(byPath["/etc/passwd"].Data); got != "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" {
		t.Errorf("passwd %q", got)
	}
	if got := string(byPath["/etc/group"].Data); !strings.Contains(got, "nonroot:x:65532:\n") || !strings.HasPrefix(got, "root:x:0:\n") {
		t.Errorf("group %q", got)
	}
	if h := byPath["/home/nonroot"]; !h.Dir || h.UID != 65532 || h.Mode != 0o700 {
		t.Errorf("home %+v", h)
	}
	if _, ok := byPath["/nonexistent"]; ok {
		t.Error("nobody's /nonexistent home was created")
	}
	if tmp := byPath["/tmp"]; !tmp.Dir || tmp.Mode != 0o1777 {
		t.Errorf("/tmp %+v", tmp)
	}
}

// Installed packages come from dpkg's status file: only those installed,
// sorted by name.
func TestInstalledPackages(t *testing.T) {
	status := []byte(`Package: tcpdump
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 4.99.3-1
Description: command-line network traffic analyzer
 This program allows you to dump the traffic on a network.

Package: base-files
Essential: yes
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u5

Package: removed-thing
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
`)
	got := InstalledPackages(status)
	if len(got) != 2 || got[0].String() != "base-files=12.4+deb12u5 (amd64)" || got[1].String() != "tcpdump=4.99.3-1 (amd64)" {
		t.Errorf("got %v", got)
	}
}
