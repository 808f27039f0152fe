// Command fake-nvidia-smi stands in for the NVIDIA driver's nvidia-smi on
// the simulation's GPU hosts (package simgpu): the agent runs it chrooted
// into a host's root, where it reads and changes the simulated GPUs' state.
// Built static (CGO_ENABLED=0) so that it runs in a root without libraries.
package main

import (
	"os"

	"nodemend.dev/nodemend/sim/simgpu"
)

func main() {
	os.Exit(simgpu.Run("/", os.Args[1:], os.Stdout, os.Stderr))
}
