//go:build linux && cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// Available reports whether this binary can load NVML at all.
const Available = true

// Open loads libnvidia-ml (libraryPath, or libnvidia-ml.so.1 from the
// loader's path when empty) and initializes NVML.
func Open(libraryPath string) (nvidia.Driver, error) {
	var opts []nvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, nvml.WithLibraryPath(libraryPath))
	}
	lib := nvml.New(opts...)
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: %v", nvidia.ErrNoDriver, ret)
	default:
		return nil, fmt.Errorf("NVML init: %v", ret)
	}
	return &driver{lib: lib}, nil
}

type driver struct {
	lib nvml.Interface

	mu      sync.Mutex
	handles []nvml.Device
	closed  bool
}

func nvmlErr(what string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("NVML %s: %v", what, ret)
}

func (d *driver) Devices() ([]nvidia.Device, error) {
	n, ret := d.lib.DeviceGetCount()
	if err := nvmlErr("device count", ret); err != nil {
		return nil, err
	}
	devs := make([]nvidia.Device, 0, n)
	handles := make([]nvml.Device, 0, n)
	for i := range n {
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if err := nvmlErr(fmt.Sprintf("device %d", i), ret); err != nil {
			return nil, err
		}
		devs = append(devs, describe(i, h))
		handles = append(handles, h)
	}
	d.mu.Lock()
	d.handles = handles
	d.mu.Unlock()
	return devs, nil
}

// describe reads a device's identity; fields NVML cannot read stay empty.
func describe(index int, h nvml.Device) nvidia.Device {
	dev := nvidia.Device{Index: index, Minor: -1}
	if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
		dev.UUID = uuid
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		if p, ok := nvidia.NormalizePCI(cString(pci.BusId[:])); ok {
			dev.PCI = p
		}
	}
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		dev.Minor = minor
	}
	return dev
}

func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func (d *driver) handle(index int) (nvml.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if index >= 0 && index < len(d.handles) {
		return d.handles[index], nil
	}
	h, ret := d.lib.DeviceGetHandleByIndex(index)
	return h, nvmlErr(fmt.Sprintf("device %d", index), ret)
}

func (d *driver) Sample(index int) (nvidia.Sample, error) {
	h, err := d.handle(index)
	if err != nil {
		return nvidia.Sample{}, err
	}
	s := nvidia.Sample{Taken: time.Now()}
	ids := nvidia.FieldIDs()
	values := make([]nvml.FieldValue, len(ids))
	for i, id := range ids {
		values[i].FieldId = id
	}
	if ret := h.GetFieldValues(values); ret == nvml.SUCCESS {
		for _, v := range values {
			s.Fields = append(s.Fields, nvidia.FieldValue{ID: v.FieldId, Return: v.NvmlReturn, ValueType: v.ValueType, Raw: v.Value})
		}
	} else if ret == nvml.ERROR_GPU_IS_LOST {
		return s, nvmlErr("field values", ret)
	}
	if r, ret := h.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		s.ClocksEventReasons = nvidia.Value{V: r, OK: true}
	}
	if links := s.Field(nvidia.FieldNVLinkLinkCount); links.OK {
		for l := 0; l < int(min(links.V, 64)); l++ {
			st, ret := h.GetNvLinkState(l)
			switch {
			case ret != nvml.SUCCESS:
				s.NVLinks = append(s.NVLinks, nvidia.LinkUnsupported)
			case st == nvml.FEATURE_ENABLED:
				s.NVLinks = append(s.NVLinks, nvidia.LinkUp)
			default:
				s.NVLinks = append(s.NVLinks, nvidia.LinkDown)
			}
		}
	}
	if info, ret := h.GetGpuFabricInfoV().V3(); ret == nvml.SUCCESS && info.State != nvidia.FabricStateNotSupported {
		s.Fabric = nvidia.FabricInfo{Supported: true, State: info.State, Status: info.Status, HealthMask: info.HealthMask, HealthSummary: info.HealthSummary}
	}
	return s, nil
}

// WatchEvents registers every device for XID and double-bit ECC events in
// one event set and waits on it. nvmlEventSetWait blocks in C; a one-second
// timeout lets it notice ctx without busy polling (an event is returned the
// moment it arrives, the timeout only bounds shutdown).
func (d *driver) WatchEvents(ctx context.Context, fn func(nvidia.Event)) error {
	devs, err := d.Devices()
	if err != nil {
		return err
	}
	set, ret := d.lib.EventSetCreate()
	if err := nvmlErr("event set", ret); err != nil {
		return err
	}
	defer set.Free()
	want := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
	byUUID := map[string]nvidia.Device{}
	registered := 0
	for _, dev := range devs {
		h, err := d.handle(dev.Index)
		if err != nil {
			continue
		}
		supported, ret := h.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&want == 0 {
			continue
		}
		if ret := h.RegisterEvents(supported&want, set); ret == nvml.SUCCESS {
			registered++
			byUUID[dev.UUID] = dev
		}
	}
	if registered == 0 {
		return errors.New("NVML events: no device supports XID or ECC events")
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(1000)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			return nvmlErr("event wait", ret)
		}
		ev := nvidia.Event{Kind: nvidia.EventKind(data.EventType), XID: data.EventData, Observed: time.Now()}
		if data.Device != nil {
			if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
				ev.Device = byUUID[uuid]
			}
			if ev.Device.UUID == "" {
				ev.Device = describe(-1, data.Device)
			}
		}
		fn(ev)
	}
	return nil
}

func (d *driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	return nvmlErr("shutdown", d.lib.Shutdown())
}
