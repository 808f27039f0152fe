package nvmllib

import (
	"context"
	"errors"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// TestOpen runs the real library path. On a machine without the NVIDIA
// driver (CI, most nodes) Open must fail with ErrNoDriver — that is what
// makes the nvidia monitor not apply. On a GPU machine it must list the GPUs,
// sample each one and arm the event set; the test logs what it saw.
func TestOpen(t *testing.T) {
	drv, err := Open("")
	if err != nil {
		if !errors.Is(err, nvidia.ErrNoDriver) {
			t.Fatalf("without a driver Open must report ErrNoDriver, got %v", err)
		}
		t.Logf("no NVIDIA driver here (cgo build: %v): %v", Available, err)
		return
	}
	defer drv.Close()
	devs, err := drv.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("NVML loaded but lists no GPU: %v, %v", devs, err)
	}
	for _, d := range devs {
		s, err := drv.Sample(d.Index)
		if err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		fatal, degraded := nvidia.EvalFabric(s.Fabric)
		t.Logf("%s uuid=%s minor=%d fields=%d clocks=%+v links=%v fabric=%+v (fatal %q degraded %q) clocks verdict %+v",
			d.Name(), d.UUID, d.Minor, len(s.Fields), s.ClocksEventReasons, s.NVLinks, s.Fabric, fatal, degraded, nvidia.DecodeClocks(s.ClocksEventReasons.V))
		for _, id := range nvidia.FieldIDs() {
			t.Logf("  field %d = %+v", id, s.Field(id))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := drv.WatchEvents(ctx, func(ev nvidia.Event) { t.Logf("event %+v", ev) }); err != nil {
		t.Fatalf("event set: %v", err)
	}
}
