package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/internal/command"
)

// Resetter resets accelerators.
type Resetter interface {
	Mechanism() string
	// Reset resets devices (PCI bus IDs; none: every GPU of the host) and
	// the ones the driver requires with them, then checks that each
	// answers healthy. The result names what was reset.
	Reset(ctx context.Context, devices []string) (ResetResult, error)
}

// ResetResult is what a reset did.
type ResetResult struct {
	Devices []string
	Message string
}

// Errors of Reset. ErrBusy and ErrRefused mean nothing was reset.
var (
	// ErrBusy: a process holds a GPU of the set.
	ErrBusy = errors.New("accelerator in use")
	// ErrRefused: the driver refused the reset (not supported, or a set it
	// requires cannot be reset together).
	ErrRefused = errors.New("reset refused by the driver")
	// ErrUnhealthy: the reset ran, but a GPU does not answer healthy.
	ErrUnhealthy = errors.New("accelerator not healthy after the reset")
)

// NvidiaSMI resets NVIDIA GPUs with the driver's nvidia-smi (NVML has no
// public reset call). nvidia-smi's own rules (its manual, --gpu-reset): no
// process may use the GPUs; GPUs with NVLink connections must be reset
// together unless the system can reset them individually (NVIDIA Ampere
// and later with Fabric Manager on NVSwitch systems, Hopper and later
// without), and nvidia-smi names the GPUs that must be added when the set
// is incomplete. So: check for processes, reset the set, add once the GPUs
// the driver names (if none of them is busy either), and refuse otherwise.
type NvidiaSMI struct {
	Commands command.Runner
}

// Mechanism implements Resetter.
func (NvidiaSMI) Mechanism() string { return "nvidia-smi" }

// Reset implements Resetter.
func (n NvidiaSMI) Reset(ctx context.Context, devices []string) (ResetResult, error) {
	all, err := n.gpus(ctx)
	if err != nil {
		return ResetResult{}, err
	}
	set := []string{}
	if len(devices) == 0 {
		set = append(set, all...)
	}
	for _, d := range devices {
		id := NormalizeBusID(d)
		if !slices.Contains(all, id) {
			return ResetResult{}, fmt.Errorf("%w: no GPU %s on this host (GPUs: %s)", ErrRefused, d, strings.Join(all, ", "))
		}
		set = appendNew(set, id)
	}
	if len(set) == 0 {
		return ResetResult{}, fmt.Errorf("%w: no GPUs on this host", ErrRefused)
	}
	for try := 0; ; try++ {
		if err := n.idle(ctx, set); err != nil {
			return ResetResult{Devices: set}, err
		}
		out, err := n.run(ctx, "--gpu-reset", "-i", strings.Join(set, ","))
		if err == nil {
			break
		}
		if busyOutput.MatchString(out) {
			return ResetResult{Devices: set}, fmt.Errorf("%w: %s", ErrBusy, firstLine(out, err))
		}
		more := missingPeers(out, set)
		if len(more) == 0 || try > 0 {
			return ResetResult{Devices: set}, fmt.Errorf("%w: %s", ErrRefused, firstLine(out, err))
		}
		// The driver requires its NVLink peers in the same reset.
		set = append(set, more...)
	}
	if err := n.healthy(ctx, set); err != nil {
		return ResetResult{Devices: set}, err
	}
	return ResetResult{Devices: set, Message: "reset and healthy: " + strings.Join(set, ", ")}, nil
}

func (n NvidiaSMI) run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	err := n.Commands.Run(ctx, "nvidia-smi", args, &out)
	s := out.String()
	if err != nil {
		s += "\n" + err.Error()
	}
	return s, err
}

// gpus lists the host's GPUs by bus ID.
func (n NvidiaSMI) gpus(ctx context.Context) ([]string, error) {
	out, err := n.run(ctx, "--query-gpu=pci.bus_id", "--format=csv,noheader")
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %s", firstLine(out, err))
	}
	var ids []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); busID.MatchString(l) {
			ids = appendNew(ids, NormalizeBusID(l))
		}
	}
	return ids, nil
}

// idle fails with ErrBusy when a compute process runs on a GPU of set.
func (n NvidiaSMI) idle(ctx context.Context, set []string) error {
	out, err := n.run(ctx, "--query-compute-apps=gpu_bus_id,pid,process_name", "--format=csv,noheader")
	if err != nil {
		return fmt.Errorf("%w: cannot list the GPUs' processes: %s", ErrRefused, firstLine(out, err))
	}
	var holders []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, ",")
		if len(f) < 2 || !busID.MatchString(strings.TrimSpace(f[0])) {
			continue
		}
		if slices.Contains(set, NormalizeBusID(strings.TrimSpace(f[0]))) {
			var who []string
			for _, x := range f[1:] {
				who = append(who, strings.TrimSpace(x))
			}
			holders = append(holders, strings.Join(who, " "))
		}
	}
	if len(holders) > 0 {
		return fmt.Errorf("%w: processes hold the GPUs to reset (pid name: %s)", ErrBusy, strings.Join(holders, "; "))
	}
	return nil
}

// healthy checks that each GPU of set answers a query after the reset, with
// no field in an error state.
func (n NvidiaSMI) healthy(ctx context.Context, set []string) error {
	out, err := n.run(ctx, "--query-gpu=pci.bus_id,uuid,pstate,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader", "-i", strings.Join(set, ","))
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnhealthy, firstLine(out, err))
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, ",")
		if len(f) < 2 || !busID.MatchString(strings.TrimSpace(f[0])) {
			continue
		}
		id := NormalizeBusID(strings.TrimSpace(f[0]))
		if errorField.MatchString(l) {
			return fmt.Errorf("%w: %s answers %q", ErrUnhealthy, id, strings.TrimSpace(l))
		}
		seen[id] = true
	}
	for _, id := range set {
		if !seen[id] {
			return fmt.Errorf("%w: %s does not answer", ErrUnhealthy, id)
		}
	}
	return nil
}

var (
	busID = regexp.MustCompile(`^(?i)[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	// anyBusID finds bus IDs in nvidia-smi's prose.
	anyBusID = regexp.MustCompile(`(?i)\b[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b`)
	// busyOutput is nvidia-smi refusing because a client holds the GPU.
	busyOutput = regexp.MustCompile(`(?i)in use by another client|currently being used by one or more other processes`)
	// errorField is how nvidia-smi marks a value it cannot read.
	errorField = regexp.MustCompile(`\[(GPU requires reset|Unknown Error|GPU is lost)\]|(?i)unable to determine the device handle`)
)

// missingPeers are the GPUs nvidia-smi names in its refusal that the set
// lacks: the NVLink peers that must be reset with it.
func missingPeers(out string, set []string) []string {
	var more []string
	for _, m := range anyBusID.FindAllString(out, -1) {
		if id := NormalizeBusID(m); !slices.Contains(set, id) {
			more = appendNew(more, id)
		}
	}
	return more
}

// NormalizeBusID writes a PCI bus ID as the kernel does: a 4-digit
// lower-case domain ("00000000:3B:00.0" → "0000:3b:00.0"), function 0 when none is given.
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexByte(s, ':'); i > 4 && strings.Trim(s[:i-4], "0") == "" {
		s = s[i-4:]
	}
	if strings.Count(s, ":") == 2 && !strings.Contains(s, ".") {
		s += ".0" // the accelerator monitors' subject: function 0
	}
	return s
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func firstLine(out string, err error) string {
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return err.Error()
}

// SelectResetter picks the resetter of the driver tool installed where one
// of runners finds it, in order (the agent's own filesystem, where the
// NVIDIA container runtime mounts the driver's tools, then the host's,
// where the driver installed them): nvidia-smi, else amd-smi (a node
// carries one vendor's GPUs; the accelerator monitors decide which apply
// the same way, by what is there). Nil runners are skipped. None
// installed: nil and why, naming a tool that is there but refused (one a
// user other than root could have written), so that the operator is not
// told it is missing.
func SelectResetter(runners ...command.Runner) (Resetter, string) {
	var refused []string
	for _, tool := range []string{"nvidia-smi", "amd-smi"} {
		for _, c := range runners {
			if c == nil {
				continue
			}
			if _, err := c.LookPath(tool); err != nil {
				if errors.Is(err, childproc.ErrUntrusted) {
					refused = append(refused, err.Error())
				}
				continue
			}
			if tool == "nvidia-smi" {
				return NvidiaSMI{Commands: c}, ""
			}
			return AMDSMI{Commands: c}, ""
		}
	}
	why := "no GPU reset tool is installed (nvidia-smi, amd-smi)"
	if len(refused) > 0 {
		why = "no GPU reset tool can be run: " + strings.Join(refused, "; ")
	}
	return nil, why
}
