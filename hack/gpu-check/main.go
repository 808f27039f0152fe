// Command gpu-check is `make gpu-check`: on a machine with an NVIDIA GPU and
// its driver (and DCGM where installed) it runs the agent's own NVIDIA
// paths against the hardware — NVML through nvmllib, the DCGM client, the
// bundle's accelerator collectors, the nvidia-smi reset — and judges each
// answer against nvidia-smi's and against the fixtures the tests use
// (package gpucheck), printing one table. Everything it read is saved under
// -out, to become fixtures. Without a GPU it says so and exits 0.
//
//	go run ./hack/gpu-check [-reset BUS_ID]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/hack/gpu-check/gpucheck"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/nvmllib"
)

type options struct {
	out         string
	fixtures    string
	library     string
	events      time.Duration
	diagTimeout time.Duration
	reset       string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "_output/gpu-check", "where the table and every raw answer are written")
	flag.StringVar(&o.fixtures, "fixtures", "pkg/monitors/nvidia/dcgm/testdata", "the DCGM parsers' fixtures, compared with dcgmi's real output")
	flag.StringVar(&o.library, "nvml", "", "libnvidia-ml path (default: the loader's libnvidia-ml.so.1)")
	flag.DurationVar(&o.events, "events", 5*time.Second, "how long to hold the NVML event subscription")
	flag.DurationVar(&o.diagTimeout, "diag-timeout", 10*time.Minute, "time limit of the level-1 DCGM diagnostic")
	flag.StringVar(&o.reset, "reset", "", "PCI bus ID of an idle GPU to reset through the agent's nvidia-smi path (nothing is reset without it)")
	flag.Parse()
	code, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-check:", err)
	}
	os.Exit(code)
}

// checker runs the checks and keeps what each tool said.
type checker struct {
	o      options
	smi    command.Runner
	report gpucheck.Report
}

// raw saves a tool's answer as a future fixture.
func (c *checker) raw(name string, data []byte) {
	p := filepath.Join(c.o.out, "raw", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		_ = os.WriteFile(p, data, 0o644)
	}
}

// nvidiaSMI runs nvidia-smi as the agent runs host tools and saves its output.
func (c *checker) nvidiaSMI(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	err := c.smi.Run(ctx, "nvidia-smi", args, &out)
	c.raw("nvidia-smi/"+name, out.Bytes())
	if err != nil {
		// nvidia-smi prints its refusals ("... is not a valid field") on stdout.
		if s := strings.TrimSpace(out.String()); s != "" {
			return out.String(), fmt.Errorf("%s", s)
		}
	}
	return out.String(), err
}

func run(ctx context.Context, o options) (int, error) {
	c := &checker{o: o, smi: command.Exec{}}
	_, smiErr := c.smi.LookPath("nvidia-smi")
	drv, nvmlErr := nvmllib.Open(o.library)
	if smiErr != nil && errors.Is(nvmlErr, nvidia.ErrNoDriver) {
		fmt.Println("gpu-check: no NVIDIA GPU here (no nvidia-smi, no NVML driver library): nothing to check.")
		return 0, nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}
	switch {
	case !nvmllib.Available:
		c.report.Add("NVML load", "node", gpucheck.Failed, "this gpu-check was built without cgo (CGO_ENABLED=1 and a C compiler are needed): %v", nvmlErr)
	case nvmlErr != nil:
		c.report.Add("NVML load", "node", gpucheck.Failed, "%v", nvmlErr)
	default:
		defer drv.Close()
		c.report.Add("NVML load", "node", gpucheck.Matched, "libnvidia-ml loaded and initialized")
	}

	var devs []nvidia.Device
	if drv != nil {
		var err error
		if devs, err = drv.Devices(); err != nil {
			c.report.Add("device count", "node", gpucheck.Failed, "NVML: %v", err)
		}
	}
	ident, err := c.nvidiaSMI(ctx, "query-identity.csv", "--query-gpu="+gpucheck.IdentityQuery, "--format=csv,noheader")
	smiGPUs, perr := gpucheck.ParseSMIGPUs(ident)
	switch {
	case err != nil:
		c.report.Add("device count", "node", gpucheck.Failed, "nvidia-smi: %v", err)
	case perr != nil:
		c.report.Add("device count", "node", gpucheck.Differed, "%v", perr)
	case drv != nil:
		gpucheck.CompareDevices(&c.report, devs, smiGPUs)
	}
	if len(devs) == 0 && len(smiGPUs) == 0 && err == nil {
		fmt.Println("gpu-check: the NVIDIA driver is here but sees no GPU: nothing to check.")
		return 0, nil
	}

	if drv != nil {
		c.events(ctx, drv)
		for _, d := range devs {
			c.fields(ctx, drv, d)
		}
	}
	c.dcgm(ctx)
	c.bundle(ctx)
	c.resetGPU(ctx)

	var table bytes.Buffer
	if err := c.report.Write(&table); err != nil {
		return 1, err
	}
	fmt.Print(table.String())
	_ = os.WriteFile(filepath.Join(o.out, "table.txt"), table.Bytes(), 0o644)
	fmt.Printf("\nraw answers (to turn into fixtures): %s\n", filepath.Join(o.out, "raw"))
	if !c.report.OK() {
		return 1, nil
	}
	return 0, nil
}

// events holds the agent's NVML event subscription (XID and double-bit ECC
// on every GPU) for a few seconds: registration is what can fail on real
// hardware; an event in that window is reported too.
func (c *checker) events(ctx context.Context, drv nvidia.Driver) {
	ctx, cancel := context.WithTimeout(ctx, c.o.events)
	defer cancel()
	var got []string
	err := drv.WatchEvents(ctx, func(ev nvidia.Event) {
		got = append(got, fmt.Sprintf("%s kind %#x xid %d", ev.Device.Name(), uint64(ev.Kind), ev.XID))
	})
	switch {
	case err != nil && strings.Contains(err.Error(), "no device supports"):
		c.report.Add("event subscription", "node", gpucheck.NotPresent, "%v", err)
	case err != nil:
		c.report.Add("event subscription", "node", gpucheck.Failed, "%v", err)
	default:
		c.report.Add("event subscription", "node", gpucheck.Matched, "XID and ECC events registered, held %s; %d events: %s",
			c.o.events, len(got), strings.Join(got, "; "))
	}
}

// fields reads one GPU as the agent's health check does (nvmllib Sample)
// and compares each field with nvidia-smi's answer.
func (c *checker) fields(ctx context.Context, drv nvidia.Driver, d nvidia.Device) {
	subject := fmt.Sprintf("GPU %d", d.Index)
	s, err := drv.Sample(d.Index)
	if err != nil {
		c.report.Add("field reads", subject, gpucheck.Failed, "%v", err)
		return
	}
	idx := strconv.Itoa(d.Index)
	for _, p := range gpucheck.FieldPairs() {
		// One field per call: a driver that does not know one field
		// refuses the whole query.
		out, err := c.nvidiaSMI(ctx, fmt.Sprintf("gpu%d/query-%s.csv", d.Index, p.SMI), "--query-gpu="+p.SMI, "--format=csv,noheader", "-i", idx)
		gpucheck.CompareField(&c.report, subject, p, s, out, err)
	}
	if pcie := s.Field(nvidia.FieldPCIeReplayCounter); pcie.OK {
		c.report.Add("PCIe replay counter", subject, gpucheck.Matched, "%d (NVML only: nvidia-smi -q prints it, no query field)", pcie.V)
	} else {
		c.report.Add("PCIe replay counter", subject, gpucheck.NotPresent, "NVML does not report it on this GPU")
	}
	nvl, _ := c.nvidiaSMI(ctx, fmt.Sprintf("gpu%d/nvlink-s.txt", d.Index), "nvlink", "-s", "-i", idx)
	gpucheck.CompareNVLink(&c.report, subject, s, nvl)
	q, err := c.nvidiaSMI(ctx, fmt.Sprintf("gpu%d/q.txt", d.Index), "-q", "-i", idx)
	if err != nil {
		c.report.Add("fabric state", subject, gpucheck.Failed, "nvidia-smi -q: %v", err)
	} else {
		gpucheck.CompareFabric(&c.report, subject, s, q)
	}
}

// dcgm runs the agent's DCGM client: health watches, a health check, a
// field read, and a level-1 diagnostic; dcgmi's JSON is compared with the
// shapes of the parsers' fixtures.
func (c *checker) dcgm(ctx context.Context) {
	client := &dcgm.Client{Runner: c.smi, From: dcgm.FromAgent}
	if err := client.Installed(); err != nil {
		c.report.Add("DCGM", "node", gpucheck.NotPresent, "%v", err)
		return
	}
	if err := client.EnableWatches(ctx); err != nil {
		st := gpucheck.Failed
		if errors.Is(err, dcgm.ErrUnreachable) {
			st = gpucheck.NotPresent // dcgmi without a running host engine
		}
		c.report.Add("DCGM health watches", "node", st, "%v", err)
		return
	}
	c.report.Add("DCGM health watches", "node", gpucheck.Matched, "dcgmi health --set a")
	if h, err := client.Health(ctx); err != nil {
		c.report.Add("DCGM health", "node", gpucheck.Failed, "%v", err)
	} else {
		c.report.Add("DCGM health", "node", gpucheck.Matched, "overall %s, %d incidents", h.Overall, len(h.Incidents))
	}
	var raw bytes.Buffer
	_ = c.smi.Run(ctx, "dcgmi", []string{"health", "--check", "--json"}, &raw)
	c.raw("dcgmi/health.json", raw.Bytes())
	c.shape("DCGM health JSON", raw.Bytes(), "health")

	if rows, err := client.Fields(ctx, []dcgm.FieldID{dcgm.FieldClocksEventReasons}); err != nil {
		c.report.Add("DCGM field read", "node", gpucheck.Failed, "%v", err)
	} else {
		c.report.Add("DCGM field read", "node", gpucheck.Matched, "clocks event reasons of %d GPUs (dcgmi dmon)", len(rows))
	}

	dctx, cancel := context.WithTimeout(ctx, c.o.diagTimeout+30*time.Second)
	defer cancel()
	report, out, err := client.Diag(dctx, 1, c.o.diagTimeout)
	c.raw("dcgmi/diag-level1.json", out)
	switch {
	case err != nil:
		c.report.Add("DCGM diagnostic level 1", "node", gpucheck.Failed, "%v", err)
	case report.RuntimeError != "":
		c.report.Add("DCGM diagnostic level 1", "node", gpucheck.Failed, "DCGM could not run it: %s", report.RuntimeError)
	default:
		c.report.Add("DCGM diagnostic level 1", "node", gpucheck.Matched, "%s", report.Summary())
	}
	if len(out) > 0 {
		c.shape("DCGM diagnostic JSON", out, "diag")
	}
}

// shape compares a dcgmi JSON output with every fixture of dir.
func (c *checker) shape(check string, real []byte, dir string) {
	files, _ := filepath.Glob(filepath.Join(c.o.fixtures, dir, "*.json"))
	var fixtures [][]byte
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			fixtures = append(fixtures, data)
		}
	}
	if len(fixtures) == 0 {
		c.report.Add(check, "node", gpucheck.Failed, "no fixtures in %s", filepath.Join(c.o.fixtures, dir))
		return
	}
	extra, err := gpucheck.NewKeys(real, fixtures...)
	switch {
	case err != nil:
		c.report.Add(check, "node", gpucheck.Differed, "not JSON as the fixtures are: %v", err)
	case len(extra) > 0:
		c.report.Add(check, "node", gpucheck.Differed, "keys no fixture has: %s", strings.Join(extra, ", "))
	default:
		c.report.Add(check, "node", gpucheck.Matched, "every key is in the %d fixtures of %s", len(fixtures), dir)
	}
}

// bundle runs the accelerator collectors of a diagnostic bundle on this
// host, as the agent's NodeDiagnostic does, into a bundle under -out.
func (c *checker) bundle(ctx context.Context) {
	env := &collectors.Env{HostRoot: "/", Commands: c.smi, Now: time.Now()}
	cols := collectors.For(env, []v1alpha1.LogCategory{v1alpha1.CategoryAccelerators})
	path := filepath.Join(c.o.out, "accelerators-bundle.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		c.report.Add("bundle GPU section", "node", gpucheck.Failed, "%v", err)
		return
	}
	defer f.Close()
	start := time.Now()
	w := bundle.New(f, bundle.Options{Root: "gpu-check", ModTime: start})
	results, redactions, err := collect.Run(ctx, cols, w, collect.Options{SpoolDir: filepath.Join(c.o.out, "spool")})
	if err == nil {
		err = w.Close(bundle.Manifest{Version: bundle.ManifestVersion, Categories: []string{string(v1alpha1.CategoryAccelerators)},
			Started: start, Finished: time.Now(), Redactions: redactions, Collectors: results})
	}
	if err != nil {
		c.report.Add("bundle GPU section", "node", gpucheck.Failed, "%v", err)
		return
	}
	for _, r := range results {
		if !strings.Contains(r.Name, "nvidia") && r.Name != "accelerators/gpu-diagnostic" {
			continue
		}
		var bytes int64
		for _, f := range r.Files {
			bytes += f.Bytes
		}
		switch {
		case r.Error != "":
			c.report.Add("bundle "+r.Name, "node", gpucheck.Failed, "%s", r.Error)
		case r.Skipped != "":
			c.report.Add("bundle "+r.Name, "node", gpucheck.NotPresent, "%s", r.Skipped)
		case bytes == 0:
			c.report.Add("bundle "+r.Name, "node", gpucheck.Differed, "ran, wrote nothing")
		default:
			c.report.Add("bundle "+r.Name, "node", gpucheck.Matched, "%d files, %d bytes (%s)", len(r.Files), bytes, path)
		}
	}
}

// resetGPU resets one idle GPU through the agent's nvidia-smi path, only
// when asked for by -reset: the path refuses a GPU a process holds, and adds
// the NVLink peers the driver requires in the same reset.
func (c *checker) resetGPU(ctx context.Context) {
	if c.o.reset == "" {
		c.report.Add("GPU reset", "node", gpucheck.Skipped, "not asked for (RESET=<bus id of an idle GPU>)")
		return
	}
	res, err := remediate.NvidiaSMI{Commands: c.smi}.Reset(ctx, []string{c.o.reset})
	switch {
	case errors.Is(err, remediate.ErrBusy):
		c.report.Add("GPU reset", c.o.reset, gpucheck.Skipped, "not idle, nothing reset: %v", err)
	case err != nil:
		c.report.Add("GPU reset", c.o.reset, gpucheck.Failed, "%v", err)
	default:
		c.report.Add("GPU reset", c.o.reset, gpucheck.Matched, "%s", res.Message)
	}
}
