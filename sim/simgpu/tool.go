package simgpu

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// nvidia-smi's exit statuses (its manual, RETURN VALUE).
const (
	exitOK          = 0
	exitInvalidArgs = 2
	exitNotFound    = 6
	exitOther       = 255
)

// requiresReset is how nvidia-smi writes a value of a GPU that needs a reset.
const requiresReset = "[GPU requires reset]"

// Run is the stand-in nvidia-smi: it answers args from the GPUs' state under
// root ("/" for the tool, which runs chrooted into the host root) and
// returns the exit status.
func Run(root string, args []string, stdout, stderr io.Writer) int {
	return runAt(root, args, stdout, stderr, time.Now())
}

func runAt(root string, args []string, stdout, stderr io.Writer, now time.Time) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "nvidia-smi %s: not simulated\n", args[0])
		return exitInvalidArgs
	}
	fl := flag.NewFlagSet("nvidia-smi", flag.ContinueOnError)
	fl.SetOutput(stderr)
	queryGPU := fl.String("query-gpu", "", "GPU fields to print")
	queryApps := fl.String("query-compute-apps", "", "compute process fields to print")
	format := fl.String("format", "", "output format: csv[,noheader]")
	ids := fl.String("i", "", "GPUs: indices, bus IDs or UUIDs, comma-separated")
	fl.StringVar(ids, "id", "", "same as -i")
	reset := fl.Bool("gpu-reset", false, "reset the GPUs")
	fl.BoolVar(reset, "r", false, "same as --gpu-reset")
	query := fl.Bool("q", false, "print the GPUs' attributes")
	if err := fl.Parse(args); err != nil {
		return exitInvalidArgs
	}
	s, err := load(root)
	if err != nil {
		fmt.Fprintf(stderr, "Failed to initialize NVML: %v\n", err)
		return exitOther
	}
	if len(s.gpus) == 0 {
		fmt.Fprintln(stdout, "No devices were found")
		return exitNotFound
	}
	set, ok := s.selected(*ids)
	if !ok {
		fmt.Fprintln(stdout, "No devices were found")
		return exitNotFound
	}
	switch {
	case *reset:
		return s.reset(root, set, stdout, now)
	case *queryGPU != "":
		return queryCSV(*queryGPU, *format, gpuFields, rowsOf(set), stdout, stderr)
	case *queryApps != "":
		var rows []row
		for _, p := range s.busy {
			if slices.ContainsFunc(set, func(g gpu) bool { return g.bus == p.bus }) {
				rows = append(rows, row{proc: p, gpu: s.byBus(p.bus)})
			}
		}
		return queryCSV(*queryApps, *format, appFields, rows, stdout, stderr)
	case *query:
		printQuery(set, stdout, now)
		return exitOK
	}
	fmt.Fprintln(stderr, "nvidia-smi: only --query-gpu, --query-compute-apps, --gpu-reset and -q are simulated")
	return exitInvalidArgs
}

// selected are the GPUs -i names (all when empty); false when one is not a
// GPU of the host.
func (s state) selected(ids string) ([]gpu, bool) {
	if strings.TrimSpace(ids) == "" {
		return s.gpus, true
	}
	var set []gpu
	for _, id := range strings.Split(ids, ",") {
		id = strings.TrimSpace(id)
		i := slices.IndexFunc(s.gpus, func(g gpu) bool {
			return fmt.Sprint(g.index) == id || strings.EqualFold(g.uuid, id) || g.bus == toolForm(id)
		})
		if i < 0 {
			return nil, false
		}
		if !slices.ContainsFunc(set, func(g gpu) bool { return g.index == i }) {
			set = append(set, s.gpus[i])
		}
	}
	return set, true
}

func (s state) byBus(bus string) gpu {
	for _, g := range s.gpus {
		if g.bus == bus {
			return g
		}
	}
	return gpu{index: -1, bus: bus}
}

// reset resets set unless a process holds one of its GPUs, in the words of
// the driver's tool (testdata/reset-*.txt of pkg/agent/remediate).
func (s state) reset(root string, set []gpu, stdout io.Writer, now time.Time) int {
	var inUse []string
	for _, g := range set {
		if slices.ContainsFunc(s.busy, func(p process) bool { return p.bus == g.bus }) {
			inUse = append(inUse, g.bus)
		}
	}
	if len(inUse) > 0 {
		fmt.Fprintln(stdout, "The following GPUs could not be reset:")
		for _, b := range inUse {
			fmt.Fprintf(stdout, "  GPU %s: In use by another client\n", b)
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stdout, "%d device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using this device and all compute applications running in the system.\n", len(inUse))
		return exitOther
	}
	if err := resetDone(root, set, now); err != nil {
		fmt.Fprintf(stdout, "Unable to reset GPU: %v\n", err)
		return exitOther
	}
	for _, g := range set {
		fmt.Fprintf(stdout, "GPU %s was successfully reset.\n", g.bus)
	}
	fmt.Fprintln(stdout, "All done.")
	return exitOK
}

// row is one line of a CSV query: a GPU, and for --query-compute-apps a
// process on it.
type row struct {
	gpu  gpu
	proc process
}

func rowsOf(gpus []gpu) []row {
	rows := make([]row, len(gpus))
	for i, g := range gpus {
		rows[i] = row{gpu: g}
	}
	return rows
}

// field is a queryable property; healthOnly fields of a GPU that requires a
// reset read as requiresReset, as the driver cannot answer them.
type field struct {
	value      func(row) string
	healthOnly bool
}

var gpuFields = map[string]field{
	"index":                                  {value: func(r row) string { return fmt.Sprint(r.gpu.index) }},
	"pci.bus_id":                             {value: func(r row) string { return r.gpu.bus }},
	"name":                                   {value: func(row) string { return "NVIDIA H100 80GB HBM3 (simulated)" }, healthOnly: true},
	"uuid":                                   {value: func(r row) string { return r.gpu.uuid }, healthOnly: true},
	"pstate":                                 {value: func(row) string { return "P0" }, healthOnly: true},
	"ecc.errors.uncorrected.volatile.total":  {value: func(row) string { return "0" }, healthOnly: true},
	"ecc.errors.uncorrected.aggregate.total": {value: func(row) string { return "0" }, healthOnly: true},
}

var appFields = map[string]field{
	"gpu_bus_id":   {value: func(r row) string { return r.proc.bus }},
	"gpu_uuid":     {value: func(r row) string { return r.gpu.uuid }},
	"pid":          {value: func(r row) string { return r.proc.pid }},
	"process_name": {value: func(r row) string { return r.proc.name }},
	"used_memory":  {value: func(row) string { return "1024 MiB" }},
}

// queryCSV prints rows' fields as nvidia-smi's --format=csv does: a header
// of the field names unless noheader, values joined by ", ".
func queryCSV(list, format string, known map[string]field, rows []row, stdout, stderr io.Writer) int {
	opts := strings.Split(format, ",")
	if !slices.Contains(opts, "csv") {
		fmt.Fprintln(stderr, "--format must be csv (the only format simulated)")
		return exitInvalidArgs
	}
	names := strings.Split(list, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if _, ok := known[names[i]]; !ok {
			fmt.Fprintf(stdout, "Field \"%s\" is not a valid field to query.\n", names[i])
			return exitInvalidArgs
		}
	}
	if !slices.Contains(opts, "noheader") {
		fmt.Fprintln(stdout, strings.Join(names, ", "))
	}
	for _, r := range rows {
		vals := make([]string, len(names))
		for i, n := range names {
			f := known[n]
			if f.healthOnly && r.gpu.requiresReset {
				vals[i] = requiresReset
			} else {
				vals[i] = f.value(r)
			}
		}
		fmt.Fprintln(stdout, strings.Join(vals, ", "))
	}
	return exitOK
}

// printQuery is a short form of nvidia-smi -q, for diagnostic bundles.
func printQuery(set []gpu, stdout io.Writer, now time.Time) {
	fmt.Fprintf(stdout, "\n==============NVSMI LOG==============\n\nTimestamp                                 : %s\nDriver Version                            : simulated\nAttached GPUs                             : %d\n",
		now.UTC().Format(time.ANSIC), len(set))
	for _, g := range set {
		uuid := g.uuid
		if g.requiresReset {
			uuid = requiresReset
		}
		fmt.Fprintf(stdout, "GPU %s\n    Product Name                          : %s\n    GPU UUID                              : %s\n",
			g.bus, gpuFields["name"].value(row{gpu: g}), uuid)
	}
}
