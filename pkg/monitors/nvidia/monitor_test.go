package nvidia_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/nvidiafake"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/rules"
)

func check(t *testing.T, m *nvidia.Monitor, name string) []detection.Finding {
	t.Helper()
	for _, c := range m.Checks() {
		if c.Name == name {
			fs, err := c.Run(context.Background())
			if err != nil {
				t.Fatalf("check %s: %v", name, err)
			}
			return fs
		}
	}
	t.Fatalf("no check %s", name)
	return nil
}

func TestAppliesOnlyWithGPUs(t *testing.T) {
	ctx := context.Background()
	empty := hostroot.New(t)
	if nvidia.New(detection.Env{HostRoot: empty.Dir}, nvidia.Options{Open: nvidiafake.NoDriver}).Applies(ctx) {
		t.Fatal("a node without driver or device nodes is not an NVIDIA node")
	}
	if nvidia.New(detection.Env{HostRoot: empty.Dir}, nvidia.Options{}).Applies(ctx) {
		t.Fatal("no NVML configured and no device nodes")
	}
	if nvidia.New(detection.Env{HostRoot: empty.Dir}, nvidia.Options{Open: nvidiafake.New().Opener()}).Applies(ctx) {
		t.Fatal("a driver that sees no GPU does not make an NVIDIA node")
	}
	if !nvidia.New(detection.Env{HostRoot: empty.Dir}, nvidia.Options{Open: nvidiafake.New(nvidiafake.GPUs(1)...).Opener()}).Applies(ctx) {
		t.Fatal("NVML sees a GPU")
	}
	gpus := hostroot.New(t).WithNvidiaGPUs(2)
	if !nvidia.New(detection.Env{HostRoot: gpus.Dir}, nvidia.Options{Open: nvidiafake.NoDriver}).Applies(ctx) {
		t.Fatal("/dev/nvidiaN without a loadable NVML still applies (kernel XIDs, device count)")
	}
}

func TestDeviceCountWithFakeNVML(t *testing.T) {
	root := hostroot.New(t).WithNvidiaGPUs(8)
	drv := nvidiafake.New(nvidiafake.GPUs(8)...)
	labels := func(context.Context) (map[string]string, error) {
		return map[string]string{accel.InstanceTypeLabel: "p5.48xlarge"}, nil
	}
	m := nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: drv.Opener(), NodeLabels: labels, Expect: accel.ExpectOptions{Table: accel.NvidiaGPUs()}})
	if fs := check(t, m, "nvidia-device-count"); fs != nil {
		t.Fatalf("healthy p5.48xlarge: %+v", fs)
	}
	drv.SetDevices(nvidiafake.GPUs(7))
	fs := check(t, m, "nvidia-device-count")
	if len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaDeviceCountMismatch {
		t.Fatalf("a GPU gone from the driver: %+v", fs)
	}
	drv.SetDevicesError(errors.New("GPU is lost"))
	if fs := check(t, m, "nvidia-device-count"); len(fs) != 1 {
		t.Fatalf("a driver that cannot count: %+v", fs)
	}
}

func TestHealthCheckAndFabricManager(t *testing.T) {
	root := hostroot.New(t).WithNvidiaGPUs(2).WithNVSwitches(4).WithProc()
	drv := nvidiafake.New(nvidiafake.GPUs(2)...)
	m := nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: drv.Opener()})
	if fs := check(t, m, "nvidia-health"); fs != nil {
		t.Fatalf("unsupported fields everywhere is healthy: %+v", fs)
	}
	drv.SetSample(1, nvidia.Sample{Fields: []nvidia.FieldValue{nvidia.UintField(nvidia.FieldECCDBEVolatileTotal, 1)}})
	fs := check(t, m, "nvidia-health")
	if len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaDoubleBitError || fs[0].Subject != "0000:2b:00" {
		t.Fatalf("DBE on GPU 1: %+v", fs)
	}
	fs = check(t, m, "nvidia-fabric-manager")
	if len(fs) != 1 || fs[0].Reason != health.ReasonFabricManagerNotRunning {
		t.Fatalf("NVSwitch system without nv-fabricmanager: %+v", fs)
	}
	root.AddProcess(hostroot.Process{PID: 2345, PPID: 1, Comm: "nv-fabricmanager", State: 'S'})
	if fs := check(t, m, "nvidia-fabric-manager"); fs != nil {
		t.Fatalf("FM running: %+v", fs)
	}
}

func TestHealthCheckWithoutNVMLIsAnError(t *testing.T) {
	root := hostroot.New(t).WithNvidiaGPUs(1)
	m := nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: nvidiafake.NoDriver})
	for _, c := range m.Checks() {
		if c.Name == "nvidia-health" {
			if _, err := c.Run(context.Background()); !errors.Is(err, nvidia.ErrNoDriver) {
				t.Fatalf("want ErrNoDriver (the previous state is kept), got %v", err)
			}
		}
	}
}

// TestStreamPushesEvents: an NVML event reaches the report callback at once,
// not at the next check period.
func TestStreamPushesEvents(t *testing.T) {
	drv := nvidiafake.New(nvidiafake.GPUs(2)...)
	m := nvidia.New(detection.Env{HostRoot: hostroot.New(t).Dir}, nvidia.Options{Open: drv.Opener(), CheckPeriod: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan detection.Finding, 1)
	_, armed := drv.Watching()
	go func() { _ = m.Stream(ctx, func(f detection.Finding) { got <- f }) }()
	<-armed
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	drv.Emit(nvidia.Event{Device: nvidiafake.GPUs(2)[1], Kind: nvidia.EventXID, XID: 79, Observed: at})
	select {
	case f := <-got:
		if f.Reason != health.ReasonNvidiaXID79Error || f.Subject != "0000:2b:00" || !f.Observed.Equal(at) {
			t.Fatalf("finding %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event was not pushed")
	}
	if err := m.Close(); err != nil || drv.Closes() != 1 {
		t.Fatalf("Close: %v, closes %d", err, drv.Closes())
	}
}

// xid48 is the driver's XID 48 line for GPU 1 of nvidiafake.GPUs.
func xid48(at time.Time) logline.Line {
	return monitortest.Kernel("NVRM: Xid (PCI:0000:2b:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.", at)
}

func interpretLine(t *testing.T, m *nvidia.Monitor, line logline.Line) []detection.Finding {
	t.Helper()
	mt, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	var out []detection.Finding
	mt.Match(line, func(match logline.Match) { out = append(out, m.Interpret(match)...) })
	return out
}

// TestDoubleBitErrorIsOneFault: where NVML reports double-bit errors, its
// event, its counter and the kernel's XID 48 for the same GPU are one
// NvidiaDoubleBitError (same reason, same subject); without NVML, XID 48
// stays NvidiaXID48Error.
func TestDoubleBitErrorIsOneFault(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	gpus := nvidiafake.GPUs(2)

	// The kernel-only path.
	root := hostroot.New(t).WithNvidiaGPUs(2)
	m := nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: nvidiafake.NoDriver})
	if !m.Applies(ctx) {
		t.Fatal("device nodes")
	}
	if fs := interpretLine(t, m, xid48(at)); len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaXID48Error || fs[0].Subject != "0000:2b:00" {
		t.Fatalf("without NVML: %+v", fs)
	}

	// With NVML: the XID line, replayed at start before any check ran, the
	// NVML event and the counter check all raise NvidiaDoubleBitError on
	// GPU 0000:2b:00.
	drv := nvidiafake.New(gpus...)
	m = nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: drv.Opener(), CheckPeriod: time.Hour})
	if !m.Applies(ctx) {
		t.Fatal("NVML sees GPUs")
	}
	fs := interpretLine(t, m, xid48(at))
	if len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaDoubleBitError || fs[0].Subject != "0000:2b:00" ||
		!strings.Contains(fs[0].Message, "XID 48") {
		t.Fatalf("XID 48 with NVML: %+v", fs)
	}
	got := make(chan detection.Finding, 2)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, armed := drv.Watching()
	go func() { _ = m.Stream(sctx, func(f detection.Finding) { got <- f }) }()
	<-armed
	drv.Emit(nvidia.Event{Device: gpus[1], Kind: nvidia.EventDoubleBitECC, Observed: at.Add(time.Second)})
	drv.Emit(nvidia.Event{Device: gpus[1], Kind: nvidia.EventXID, XID: 48, Observed: at.Add(time.Second)})
	for range 2 {
		select {
		case f := <-got:
			if f.Reason != health.ReasonNvidiaDoubleBitError || f.Subject != "0000:2b:00" {
				t.Fatalf("NVML event: %+v", f)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the event was not pushed")
		}
	}
	drv.SetSample(1, nvidia.Sample{Fields: []nvidia.FieldValue{nvidia.UintField(nvidia.FieldECCDBEVolatileTotal, 1)}})
	fs = check(t, m, "nvidia-health")
	if len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaDoubleBitError || fs[0].Subject != "0000:2b:00" || !strings.Contains(fs[0].Message, "logged as XID 48") {
		t.Fatalf("DBE counter: %+v", fs)
	}

	// A GPU whose DBE counter NVML does not read (ECC off, consumer GPUs)
	// and that NVML did not report: XID 48 stays its own reason.
	m2 := nvidia.New(detection.Env{HostRoot: root.Dir}, nvidia.Options{Open: nvidiafake.New(gpus...).Opener()})
	m2.Applies(ctx)
	check(t, m2, "nvidia-health") // samples: every field unsupported
	if fs := interpretLine(t, m2, xid48(at)); len(fs) != 1 || fs[0].Reason != health.ReasonNvidiaXID48Error {
		t.Fatalf("unsupported counter: %+v", fs)
	}
}
