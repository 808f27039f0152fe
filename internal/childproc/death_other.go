//go:build !linux

package childproc

import "os/exec"

// DieWithParent is a no-op where the kernel offers no parent-death signal.
func DieWithParent(*exec.Cmd) {}
