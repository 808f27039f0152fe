// Command pause is the sandbox ("pause") container of the real-node test
// tier: the first process of every pod, holding the pod's namespaces open
// while its containers come and go. It does what the pause program of
// Kubernetes' build/pause does: it waits for a signal, exits 0 on SIGINT
// or SIGTERM, and reaps the zombies it inherits as PID 1 of a pod that
// shares its process namespace. It is a static Go binary so that it builds
// for any platform without a C toolchain.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "nodemend-pause 1.0 (behaves as Kubernetes pause 3.x)"

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "-v" || os.Args[1] == "--version" {
			fmt.Println(version)
			return
		}
		fmt.Fprintf(os.Stderr, "usage: %s [-v]\n", os.Args[0])
		os.Exit(2)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Printf("Shutting down, got signal: %v\n", s)
		os.Exit(0)
	}
}

// reap collects every exited child; one SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
