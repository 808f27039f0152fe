//go:build !linux

package childproc

import (
	"errors"
	"os/exec"
)

// chroot is Linux only: elsewhere the command fails to start.
func chroot(cmd *exec.Cmd, root string) {
	cmd.Err = errors.New("running a tool in the host root needs Linux")
}
