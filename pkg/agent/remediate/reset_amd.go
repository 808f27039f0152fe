package remediate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/internal/command"
)

// AMDSMI resets AMD GPUs with ROCm's amd-smi (`amd-smi reset --gpureset
// -g N`), which asks the amdgpu driver for a GPU recovery. What the tool
// and the driver do, and how this resetter answers it:
//
//   - The driver recovers a GPU whoever uses it: neither it nor amd-smi
//     refuses a GPU in use, so the resetter checks the processes itself
//     (`amd-smi process`) and refuses while any is left.
//   - A GPU of an XGMI hive is recovered with the whole hive, and AMD does
//     not promise per-GPU containment there; amd-smi names neither the
//     hive nor the GPUs a reset took with it. So a process on any GPU of
//     the host refuses the reset. The controller drained the node before
//     the rung, so such a process is one nodemend must not kill.
//   - amd-smi reports a failed reset in its output, not always in its exit
//     status ("Failed to reset GPU", or the library's status, such as
//     "AMDSMI_STATUS_BUSY - Device busy"; a refused command prints an
//     {"error", "code"} object and may exit 0): the resetter reads the
//     --json output of every call and accepts only "Successfully reset
//     GPU" for every GPU of the set.
//
// Then each GPU reset must answer amd-smi again with its bus ID.
type AMDSMI struct {
	Commands command.Runner
}

// Mechanism implements Resetter.
func (AMDSMI) Mechanism() string { return "amd-smi" }

// amdResetDone is amd-smi's result for a GPU it reset.
const amdResetDone = "Successfully reset GPU"

// amdGPU is one entry of `amd-smi list --json`.
type amdGPU struct {
	GPU  int    `json:"gpu"`
	BDF  string `json:"bdf"`
	UUID string `json:"uuid"`
}

// Reset implements Resetter.
func (a AMDSMI) Reset(ctx context.Context, devices []string) (ResetResult, error) {
	gpus, err := a.list(ctx)
	if err != nil {
		return ResetResult{}, fmt.Errorf("%w: listing GPUs: %v", ErrRefused, err)
	}
	index := map[string]int{}
	var all []string
	for _, g := range gpus {
		if busID.MatchString(g.BDF) {
			id := NormalizeBusID(g.BDF)
			index[id] = g.GPU
			all = appendNew(all, id)
		}
	}
	set := []string{}
	if len(devices) == 0 {
		set = append(set, all...)
	}
	for _, d := range devices {
		id := NormalizeBusID(d)
		if _, ok := index[id]; !ok {
			return ResetResult{}, fmt.Errorf("%w: no GPU %s on this host (GPUs: %s)", ErrRefused, d, strings.Join(all, ", "))
		}
		set = appendNew(set, id)
	}
	if len(set) == 0 {
		return ResetResult{}, fmt.Errorf("%w: no GPUs on this host", ErrRefused)
	}
	if err := a.idle(ctx, index); err != nil {
		return ResetResult{Devices: set}, err
	}
	args := []string{"reset", "--gpureset", "-g"}
	for _, id := range set {
		args = append(args, strconv.Itoa(index[id]))
	}
	out, runErr := a.run(ctx, append(args, "--json")...)
	done, failures := amdResetResults(out, index, set)
	switch {
	case len(done) == 0 && len(failures) == 0:
		return ResetResult{Devices: set}, fmt.Errorf("%w: amd-smi reset answered no result: %s", ErrRefused, firstLine(out, orNoOutput(runErr)))
	case len(done) == 0:
		// Nothing was reset: the rung is refused, the ladder escalates.
		if amdBusy(failures) {
			return ResetResult{Devices: set}, fmt.Errorf("%w: %s", ErrBusy, strings.Join(failures, "; "))
		}
		return ResetResult{Devices: set}, fmt.Errorf("%w: %s", ErrRefused, strings.Join(failures, "; "))
	case len(failures) > 0 || runErr != nil:
		// Some GPUs were reset, others not: the set is not healthy.
		msg := strings.Join(failures, "; ")
		if runErr != nil {
			msg = strings.TrimPrefix(msg+"; "+runErr.Error(), "; ")
		}
		return ResetResult{Devices: set}, fmt.Errorf("%w: reset %s, not the rest: %s", ErrUnhealthy, strings.Join(done, ", "), msg)
	}
	if err := a.healthy(ctx, set); err != nil {
		return ResetResult{Devices: set}, err
	}
	return ResetResult{Devices: set, Message: "reset and healthy: " + strings.Join(set, ", ")}, nil
}

func (a AMDSMI) run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	err := a.Commands.Run(ctx, "amd-smi", args, &out)
	return out.String(), err
}

// list reads `amd-smi list --json`.
func (a AMDSMI) list(ctx context.Context) ([]amdGPU, error) {
	out, err := a.run(ctx, "list", "--json")
	if err != nil {
		return nil, fmt.Errorf("%s", firstLine(out, err))
	}
	var gpus []amdGPU
	if err := json.Unmarshal([]byte(out), &gpus); err != nil {
		return nil, fmt.Errorf("amd-smi list: %s", firstLine(out, err))
	}
	return gpus, nil
}

// idle fails with ErrBusy when a process runs on any GPU of the host (see
// AMDSMI for why not only the set's).
func (a AMDSMI) idle(ctx context.Context, index map[string]int) error {
	out, err := a.run(ctx, "process", "--json")
	if err != nil {
		return fmt.Errorf("%w: cannot list the GPUs' processes: %s", ErrRefused, firstLine(out, err))
	}
	var per []struct {
		GPU     int `json:"gpu"`
		Process []struct {
			// Info is an object, or the sentence amd-smi writes for none
			// ("No running processes detected").
			Info json.RawMessage `json:"process_info"`
		} `json:"process_list"`
	}
	if err := json.Unmarshal([]byte(out), &per); err != nil {
		return fmt.Errorf("%w: cannot read the GPUs' processes: %s", ErrRefused, firstLine(out, err))
	}
	bdf := map[int]string{}
	for id, i := range index {
		bdf[i] = id
	}
	var holders []string
	for _, g := range per {
		for _, p := range g.Process {
			var info struct {
				Name string `json:"name"`
				PID  int    `json:"pid"`
			}
			if json.Unmarshal(p.Info, &info) != nil || info.PID == 0 {
				continue
			}
			holders = append(holders, fmt.Sprintf("%d %s on %s", info.PID, info.Name, bdf[g.GPU]))
		}
	}
	if len(holders) > 0 {
		return fmt.Errorf("%w: processes hold GPUs of the host, which an XGMI hive resets together (pid name: %s)", ErrBusy, strings.Join(holders, "; "))
	}
	return nil
}

// healthy checks that each GPU of set answers amd-smi after the reset with
// its bus ID and a UUID, not a library status.
func (a AMDSMI) healthy(ctx context.Context, set []string) error {
	gpus, err := a.list(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnhealthy, err)
	}
	for _, id := range set {
		i := slices.IndexFunc(gpus, func(g amdGPU) bool { return busID.MatchString(g.BDF) && NormalizeBusID(g.BDF) == id })
		switch {
		case i < 0:
			return fmt.Errorf("%w: %s does not answer", ErrUnhealthy, id)
		case gpus[i].UUID == "" || strings.HasPrefix(gpus[i].UUID, "AMDSMI_STATUS_"):
			return fmt.Errorf("%w: %s answers %q for its UUID", ErrUnhealthy, id, gpus[i].UUID)
		}
	}
	return nil
}

// amdResetResults reads `amd-smi reset --gpureset --json`: a list of
// {"gpu": N, "gpu_reset": RESULT}, or one {"error", "code"} object for a
// command amd-smi refused. done are the bus IDs reset; failures say what
// amd-smi answered for the others.
func amdResetResults(out string, index map[string]int, set []string) (done, failures []string) {
	var results []struct {
		GPU    int    `json:"gpu"`
		Result string `json:"gpu_reset"`
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		var refused struct {
			Error string `json:"error"`
			Code  int    `json:"code"`
		}
		if json.Unmarshal([]byte(out), &refused) == nil && refused.Error != "" {
			return nil, []string{fmt.Sprintf("%s (code %d)", refused.Error, refused.Code)}
		}
		return nil, nil
	}
	answered := map[string]bool{}
	for _, id := range set {
		for _, r := range results {
			if r.GPU != index[id] {
				continue
			}
			answered[id] = true
			if r.Result == amdResetDone {
				done = append(done, id)
			} else {
				failures = append(failures, id+": "+r.Result)
			}
		}
	}
	for _, id := range set {
		if !answered[id] && len(results) > 0 {
			failures = append(failures, id+": no result")
		}
	}
	return done, failures
}

// amdBusy: amd-smi's library reported the device busy.
func amdBusy(failures []string) bool {
	return slices.ContainsFunc(failures, func(f string) bool { return strings.Contains(f, "AMDSMI_STATUS_BUSY") })
}

func orNoOutput(err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("no output")
}
