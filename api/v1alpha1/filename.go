package v1alpha1

import (
	"regexp"
	"strings"
)

// fileNameRE is the rule of CaptureStatus.FileName in the CRD (the
// XValidation marker cannot name a constant; TestStatusFileNameIsAPlainFileName
// checks that both agree).
var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidFileName reports whether s is what the CRD accepts as a capture's
// file name: a plain file name (no path separators, no ".."), at most 253
// bytes. Clients check it again before they turn it into a path: the
// object may come from an older CRD, or from whoever can write the status.
func ValidFileName(s string) bool {
	return len(s) <= 253 && fileNameRE.MatchString(s) && !strings.Contains(s, "..")
}
