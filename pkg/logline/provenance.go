package logline

import (
	"fmt"
	"path"
	"strings"
)

// Provenance names the writers a rule believes: a line whose text matches
// the rule but that another writer may have produced is no evidence (a
// forgery, or a daemon logging under another's name), so it is not a fault.
// It is a small typed value a rule states in code and an operator in a
// config file, one of:
//
//	kernel          records the kernel generated: kmsg records of facility 0
//	                (LOG_KERN), or journal entries of _TRANSPORT=kernel with
//	                facility 0. A write to /dev/kmsg from user space always
//	                carries another facility, so no process can forge one.
//	systemd         messages of the system service manager, PID 1 (journal
//	                _PID=1), about any unit.
//	unit:NAME       journal entries whose trusted _SYSTEMD_UNIT is NAME (a
//	                process of that unit's cgroup, which only root can put
//	                processes in), and PID 1's messages about NAME (its UNIT
//	                field). Never the UNIT or SYSLOG_IDENTIFIER an ordinary
//	                process sends, which any local user chooses freely
//	                (logger -t kubelet).
//	root            journal entries of a process running as root (_UID=0),
//	                of any unit or none.
//	file            lines of any file the agent tails. A file is as
//	                trustworthy as its owner and mode: believe a file only
//	                when only root can write it (and the directories above
//	                it), as for a tool the agent runs.
//	file:PATH       lines of the file at PATH (absolute, on the host).
//
// A rule also names the Sources it reads: the provenance says who wrote a
// line, the source where the agent reads it (a kernel rule reading kmsg does
// not also read the kernel's lines in the journal, which would count every
// record twice).
type Provenance string

// The provenances without a parameter.
const (
	ByKernel  Provenance = "kernel"
	BySystemd Provenance = "systemd"
	ByRoot    Provenance = "root"
	ByAnyFile Provenance = "file"
)

const (
	unitPrefix = "unit:"
	filePrefix = "file:"
)

// ByUnit is the provenance unit:NAME.
func ByUnit(name string) Provenance { return Provenance(unitPrefix + name) }

// ByUnits is ByUnit of each name.
func ByUnits(names ...string) []Provenance {
	ps := make([]Provenance, len(names))
	for i, n := range names {
		ps[i] = ByUnit(n)
	}
	return ps
}

// ByFile is the provenance file:PATH.
func ByFile(path string) Provenance { return Provenance(filePrefix + path) }

// maxUnitName is systemd's limit on a unit name (UNIT_NAME_MAX).
const maxUnitName = 255

// Validate reports whether p is one of the forms above.
func (p Provenance) Validate() error {
	switch s := string(p); {
	case p == ByKernel, p == BySystemd, p == ByRoot, p == ByAnyFile:
		return nil
	case strings.HasPrefix(s, unitPrefix):
		return validUnitName(s[len(unitPrefix):])
	case strings.HasPrefix(s, filePrefix):
		f := s[len(filePrefix):]
		if !path.IsAbs(f) || path.Clean(f) != f || f == "/" {
			return fmt.Errorf("provenance %q: the file must be an absolute, clean path", s)
		}
		return nil
	}
	return fmt.Errorf("unknown provenance %q (want kernel, systemd, unit:NAME, root, file or file:PATH)", string(p))
}

// validUnitName checks the syntax of a systemd unit name
// (systemd.unit(5)): letters, digits and ":-_.\@", a type suffix, at most
// 255 bytes.
func validUnitName(n string) error {
	if n == "" || len(n) > maxUnitName {
		return fmt.Errorf("provenance unit:%q: a unit name has 1 to %d bytes", n, maxUnitName)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(":-_.\\@", c) >= 0) {
			return fmt.Errorf("provenance unit:%q: %q is not allowed in a unit name", n, c)
		}
	}
	dot := strings.LastIndexByte(n, '.')
	if dot <= 0 || dot == len(n)-1 {
		return fmt.Errorf("provenance unit:%q: a unit name ends in its type (kubelet.service, init.scope)", n)
	}
	return nil
}

// UnmarshalText implements encoding.TextUnmarshaler: a config file names a
// provenance as a string, validated.
func (p *Provenance) UnmarshalText(b []byte) error {
	v := Provenance(b)
	if err := v.Validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

// Accepts reports whether l's writer is one p believes. p must be valid.
func (p Provenance) Accepts(l *Line) bool {
	switch p {
	case ByKernel:
		return l.Origin.Kernel
	case BySystemd:
		return l.Source == Journal && l.Origin.Manager
	case ByRoot:
		return l.Source == Journal && l.Origin.Root
	case ByAnyFile:
		return l.Source == File
	}
	s := string(p)
	if strings.HasPrefix(s, unitPrefix) {
		return l.Source == Journal && l.Unit == s[len(unitPrefix):]
	}
	return l.Source == File && l.Unit == s[len(filePrefix):]
}
