package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel kill cmd if the agent dies first, so no host
// tool outlives it.
func DieWithParent(cmd *exec.Cmd) {
	attr(cmd).Pdeathsig = syscall.SIGKILL
}

// InRoot starts cmd chrooted into root, in its "/": a tool of the host's
// filesystem (mounted into the agent's container) then loads the host's
// libraries and reads the host's configuration, as if run on the host.
// cmd.Path is a path inside root.
func InRoot(cmd *exec.Cmd, root string) error {
	attr(cmd).Chroot = root
	cmd.Dir = "/" // applied after the chroot
	return nil
}

func attr(cmd *exec.Cmd) *syscall.SysProcAttr {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	return cmd.SysProcAttr
}
