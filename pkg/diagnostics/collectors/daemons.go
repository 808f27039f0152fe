package collectors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// The node daemons' own files, found through their processes rather than
// at fixed paths: where a kubelet keeps its configuration and where a
// daemon without the journal writes its log differ from one distribution
// (and one installer) to the next, but /proc says it for the running one.

// daemonProc is a running daemon: its PID and arguments.
type daemonProc struct {
	pid  int
	args []string
}

// findDaemons lists the running processes whose comm is one of names.
func (e *Env) findDaemons(names map[string]bool) map[string][]daemonProc {
	out := map[string][]daemonProc{}
	ents, err := os.ReadDir(e.hostPath("proc"))
	if err != nil {
		return out
	}
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		comm, err := e.readHost("proc/" + de.Name() + "/comm")
		if err != nil || !names[comm] {
			continue
		}
		cl, err := os.ReadFile(e.hostPath("proc/" + de.Name() + "/cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
		out[comm] = append(out[comm], daemonProc{pid: pid, args: args})
	}
	for _, ps := range out {
		sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	}
	return out
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"=")
		case a == "--"+name && i+1 < len(args):
			return args[i+1]
		}
	}
	return ""
}

// kubeletFiles copies the files the running kubelet names on its command
// line: --config (its KubeletConfiguration) and --kubeconfig (credentials
// in it are redacted like everything else).
func kubeletFiles(e *Env) collect.Collector {
	return collect.Collector{Name: "runtime/kubelet-files", Category: catRuntime, Run: func(ctx context.Context, out *collect.Output) error {
		ps := e.findDaemons(map[string]bool{"kubelet": true})["kubelet"]
		if len(ps) == 0 {
			return collect.Skip("no kubelet process")
		}
		var errs []error
		n := 0
		for _, flag := range []string{"config", "kubeconfig"} {
			p := flagValue(ps[0].args, flag)
			if p == "" || !filepath.IsAbs(p) {
				continue
			}
			n++
			if err := copyHostFile(ctx, out, "kubelet/"+flag+"/"+filepath.Base(p), e.hostPath(p), 0); err != nil {
				errs = append(errs, fmt.Errorf("--%s %s: %w", flag, p, err))
			}
		}
		if n == 0 {
			return collect.Skip("the kubelet (pid %d) names no --config or --kubeconfig file", ps[0].pid)
		}
		return errors.Join(errs...)
	}}
}

// daemonLogs copies the end of the file each daemon's standard output or
// error points to, when that is a regular file: a kubelet or containerd
// started without systemd logs there, not to the journal.
func daemonLogs(e *Env) collect.Collector {
	return collect.Collector{Name: "system/daemon-logs", Category: catSystem, Run: func(ctx context.Context, out *collect.Output) error {
		found := e.findDaemons(envDaemons())
		var names []string
		for n := range found {
			names = append(names, n)
		}
		sort.Strings(names)
		var errs []error
		copied := 0
		for _, name := range names {
			for _, p := range found[name] {
				seen := map[string]bool{}
				for _, fd := range []string{"1", "2"} {
					target, err := os.Readlink(e.hostPath(fmt.Sprintf("proc/%d/fd/%s", p.pid, fd)))
					if err != nil || !filepath.IsAbs(target) || seen[target] || strings.HasPrefix(target, "/dev/") {
						continue // a pipe, a socket (the journal), a terminal
					}
					seen[target] = true
					st, err := os.Stat(e.hostPath(target))
					if err != nil || !st.Mode().IsRegular() {
						continue
					}
					if err := copyHostFile(ctx, out, fmt.Sprintf("daemons/%s-%d-fd%s.log", name, p.pid, fd), e.hostPath(target), e.tail()); err != nil {
						errs = append(errs, err)
					}
					copied++
				}
			}
		}
		if copied == 0 && len(errs) == 0 {
			return collect.Skip("no daemon writes its output to a file")
		}
		return errors.Join(errs...)
	}}
}
