//go:build !linux

package selfpages

import "errors"

// ErrUnsupported: paging out needs Linux.
var ErrUnsupported = errors.New("paging out the executable needs Linux")

// ReleaseExecutable is Linux only.
func ReleaseExecutable() (int64, error) { return 0, ErrUnsupported }
