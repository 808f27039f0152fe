//go:build !linux

package childproc

import (
	"errors"
	"os/exec"
)

// DieWithParent is a no-op where the kernel offers no parent-death signal.
func DieWithParent(*exec.Cmd) {}

// InRoot is Linux-only: the agent runs on Linux nodes.
func InRoot(*exec.Cmd, string) error {
	return errors.New("running a tool inside another root filesystem needs Linux")
}
