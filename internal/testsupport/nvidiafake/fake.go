// Package nvidiafake is an in-memory NVML (nvidia.Driver) for tests and
// simulations: devices and samples are set by the caller, events are pushed
// with Emit and delivered at once to WatchEvents.
package nvidiafake

import (
	"context"
	"fmt"
	"sync"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// Driver is a fake NVML. The zero value has no devices; use New.
type Driver struct {
	mu       sync.Mutex
	devices  []nvidia.Device
	samples  map[int]nvidia.Sample
	devErr   error
	watchers map[int]chan nvidia.Event
	nextID   int
	opens    int
	closes   int
	// watching is closed and replaced each time a watcher registers, so that
	// tests can wait for the event set to be armed before emitting.
	watching chan struct{}
}

// New returns a fake with the given devices.
func New(devices ...nvidia.Device) *Driver {
	return &Driver{devices: devices, samples: map[int]nvidia.Sample{}, watchers: map[int]chan nvidia.Event{}, watching: make(chan struct{})}
}

// GPUs returns n devices with indexes 0..n-1, PCI addresses 0000:1b:00,
// 0000:2b:00, ... and minor numbers equal to their index.
func GPUs(n int) []nvidia.Device {
	ds := make([]nvidia.Device, n)
	for i := range ds {
		ds[i] = nvidia.Device{Index: i, UUID: fmt.Sprintf("GPU-fake-%04d", i), PCI: fmt.Sprintf("0000:%02x:00", 0x1b+0x10*i), Minor: i}
	}
	return ds
}

// Opener returns an nvidia.Opener that hands out d.
func (d *Driver) Opener() nvidia.Opener {
	return func(string) (nvidia.Driver, error) {
		d.mu.Lock()
		d.opens++
		d.mu.Unlock()
		return d, nil
	}
}

// NoDriver is an Opener for a node without the NVIDIA driver.
func NoDriver(string) (nvidia.Driver, error) {
	return nil, fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file", nvidia.ErrNoDriver)
}

// SetDevices replaces the device list (a GPU falling off the bus).
func (d *Driver) SetDevices(ds []nvidia.Device) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.devices = ds
}

// SetDevicesError makes Devices fail.
func (d *Driver) SetDevicesError(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.devErr = err
}

// SetSample sets what Sample returns for a device index.
func (d *Driver) SetSample(index int, s nvidia.Sample) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.samples[index] = s
}

// Devices implements nvidia.Driver.
func (d *Driver) Devices() ([]nvidia.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.devErr != nil {
		return nil, d.devErr
	}
	return append([]nvidia.Device(nil), d.devices...), nil
}

// Sample implements nvidia.Driver; a device without a set sample reads as
// healthy with nothing supported.
func (d *Driver) Sample(index int) (nvidia.Sample, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if index < 0 || index >= len(d.devices) {
		return nvidia.Sample{}, fmt.Errorf("no device %d", index)
	}
	return d.samples[index], nil
}

// WatchEvents implements nvidia.Driver.
func (d *Driver) WatchEvents(ctx context.Context, fn func(nvidia.Event)) error {
	ch := make(chan nvidia.Event, 64)
	d.mu.Lock()
	id := d.nextID
	d.nextID++
	d.watchers[id] = ch
	close(d.watching)
	d.watching = make(chan struct{})
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.watchers, id)
		d.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			fn(ev)
		}
	}
}

// Watching reports whether an event watcher is registered, and returns a
// channel closed at the next registration.
func (d *Driver) Watching() (bool, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.watchers) > 0, d.watching
}

// Emit delivers an event to every watcher.
func (d *Driver) Emit(ev nvidia.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.watchers {
		ch <- ev
	}
}

// Close implements nvidia.Driver.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closes++
	return nil
}

// Opens and Closes count Opener calls and Close calls.
func (d *Driver) Opens() int  { d.mu.Lock(); defer d.mu.Unlock(); return d.opens }
func (d *Driver) Closes() int { d.mu.Lock(); defer d.mu.Unlock(); return d.closes }
