package childproc

import (
	"os/exec"
	"syscall"
)

// chroot makes cmd start chrooted in root (keeping DieWithParent's setting).
func chroot(cmd *exec.Cmd, root string) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Chroot = root
}
