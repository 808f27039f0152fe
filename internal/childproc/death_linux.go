package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel kill cmd if the agent dies first, so no host
// tool outlives it.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
