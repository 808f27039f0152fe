package command

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the command if the agent dies first.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
