// Package rootfs builds the root file systems of nodemend's images from
// Debian packages with mmdebstrap, from the apt sources this machine
// already uses (no mirror is named here: a build reads them from the
// machine's apt configuration at run time), and strips from them what
// belongs to the build machine rather than to the image.
package rootfs

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Source is one apt source: the fields of a deb822 .sources paragraph.
type Source struct {
	Types, URIs, Suites, Components []string
	// SignedBy is the keyring that signs the repository (a path on this
	// machine, which mmdebstrap's apt reads from outside the new root).
	SignedBy string
}

// ParseSources reads an apt sources file: the one-line format of
// sources.list and *.list, or the deb822 format of *.sources (chosen by the
// file name, as apt does). Disabled paragraphs (Enabled: no) and comments
// are left out.
func ParseSources(fileName string, data []byte) ([]Source, error) {
	if strings.HasSuffix(fileName, ".sources") {
		return parseDeb822(fileName, data)
	}
	return parseOneLine(fileName, data)
}

func parseOneLine(fileName string, data []byte) ([]Source, error) {
	var out []Source
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		s := Source{Types: []string{fields[0]}}
		rest := fields[1:]
		if len(rest) > 0 && strings.HasPrefix(rest[0], "[") {
			// Options: "[arch=amd64 signed-by=/path]", possibly spread
			// over several fields.
			var opts []string
			for len(rest) > 0 {
				f := rest[0]
				rest = rest[1:]
				opts = append(opts, strings.Trim(f, "[]"))
				if strings.HasSuffix(f, "]") {
					break
				}
			}
			for _, o := range opts {
				if k, v, ok := strings.Cut(o, "="); ok && strings.EqualFold(k, "signed-by") {
					s.SignedBy = v
				}
			}
		}
		if len(rest) < 2 {
			return nil, fmt.Errorf("%s:%d: want TYPE [OPTIONS] URI SUITE [COMPONENT...]: %q", fileName, n, sc.Text())
		}
		s.URIs, s.Suites, s.Components = []string{rest[0]}, []string{rest[1]}, rest[2:]
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseDeb822(fileName string, data []byte) ([]Source, error) {
	var out []Source
	for i, para := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		last := ""
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if line[0] == ' ' || line[0] == '\t' {
				if last == "" {
					return nil, fmt.Errorf("%s: paragraph %d: continuation line without a field: %q", fileName, i+1, line)
				}
				fields[last] += "\n" + strings.TrimSpace(line)
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("%s: paragraph %d: not a field: %q", fileName, i+1, line)
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
		if len(fields) == 0 || strings.EqualFold(fields["enabled"], "no") {
			continue
		}
		s := Source{
			Types:      strings.Fields(fields["types"]),
			URIs:       strings.Fields(fields["uris"]),
			Suites:     strings.Fields(fields["suites"]),
			Components: strings.Fields(fields["components"]),
			SignedBy:   fields["signed-by"],
		}
		if len(s.Types) == 0 || len(s.URIs) == 0 || len(s.Suites) == 0 {
			return nil, fmt.Errorf("%s: paragraph %d: Types, URIs and Suites are required", fileName, i+1)
		}
		out = append(out, s)
	}
	return out, nil
}

// ForRelease keeps the binary-package sources of a Debian release and its
// companion suites (RELEASE-updates, RELEASE-security), with the main
// component only: what a Debian base image is made from. Sources of other
// releases and third-party repositories on this machine stay out.
func ForRelease(sources []Source, release string) []Source {
	var out []Source
	for _, s := range sources {
		if !slices.Contains(s.Types, "deb") || !slices.Contains(s.Components, "main") {
			continue
		}
		var suites []string
		for _, suite := range s.Suites {
			if suite == release || strings.HasPrefix(suite, release+"-") {
				suites = append(suites, suite)
			}
		}
		if len(suites) == 0 {
			continue
		}
		out = append(out, Source{Types: []string{"deb"}, URIs: s.URIs, Suites: suites, Components: []string{"main"}, SignedBy: s.SignedBy})
	}
	return out
}

// Deb822 renders sources as a deb822 .sources file.
func Deb822(sources []Source) string {
	var b strings.Builder
	for i, s := range sources {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Types: %s\nURIs: %s\nSuites: %s\nComponents: %s\n",
			strings.Join(s.Types, " "), strings.Join(s.URIs, " "), strings.Join(s.Suites, " "), strings.Join(s.Components, " "))
		if s.SignedBy != "" {
			// A multi-line Signed-By is an inline key block.
			fmt.Fprintf(&b, "Signed-By: %s\n", strings.ReplaceAll(s.SignedBy, "\n", "\n "))
		}
	}
	return b.String()
}

// AcquireOptions picks, from `apt-config dump` output, the options that
// decide whether and how this machine reaches its mirror — proxies, and
// the release-file date checks a snapshot mirror needs turned off — as
// mmdebstrap --aptopt arguments. mmdebstrap's apt does not read this
// machine's apt.conf.d; without them a build behind a proxy or from a
// snapshot fails where `apt-get update` works.
func AcquireOptions(dump []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(dump))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(key, "Acquire::") {
			continue
		}
		lower := strings.ToLower(key)
		if !strings.Contains(lower, "proxy") && lower != "acquire::check-valid-until" && lower != "acquire::check-date" && lower != "acquire::retries" {
			continue
		}
		value = strings.TrimSuffix(value, ";")
		if value == `""` {
			continue
		}
		out = append(out, key+" "+value+";")
	}
	return out
}
