// Package accel holds what the accelerator monitors (nvidia, neuron, amdgpu)
// share: how many devices a node is expected to have, and counting device
// nodes under the host root. Nothing here knows a vendor API.
package accel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// InstanceTypeLabel is the well-known node label carrying the cloud instance
// type, which the built-in tables map to a device count.
const InstanceTypeLabel = "node.kubernetes.io/instance-type"

// NodeLabels returns this node's labels. The agent serves them from a cache:
// it must not cost an API request per call.
type NodeLabels func(ctx context.Context) (map[string]string, error)

// Expectation is how many devices a node should have, and where that number
// comes from (for messages: an operator must see why nodemend expects 8).
type Expectation struct {
	Count  int
	Source string
}

// Sources of the expected device count, in order of precedence.
type ExpectOptions struct {
	// Count is the configured count; 0 means not configured.
	Count int
	// Label names a node label whose value is the expected count; empty
	// means none.
	Label string
	// Table maps instance types (InstanceTypeLabel) to counts.
	Table map[string]int
}

// Expected resolves the expected count: the configured count, else the
// configured label, else the instance-type table. ok is false when none of
// them knows; the count checks then compare only what the node itself shows.
// A label that is present but not a positive integer is an error, so that a
// typo is not silently ignored.
func Expected(o ExpectOptions, labels map[string]string) (e Expectation, ok bool, err error) {
	if o.Count > 0 {
		return Expectation{Count: o.Count, Source: "the agent config"}, true, nil
	}
	if o.Label != "" {
		if v, found := labels[o.Label]; found {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n <= 0 {
				return Expectation{}, false, fmt.Errorf("node label %s=%q is not a positive device count", o.Label, v)
			}
			return Expectation{Count: n, Source: "node label " + o.Label}, true, nil
		}
	}
	if it := labels[InstanceTypeLabel]; it != "" {
		if n, found := o.Table[it]; found {
			return Expectation{Count: n, Source: "instance type " + it}, true, nil
		}
	}
	return Expectation{}, false, nil
}

// ResolveExpected reads the node labels only when the config does not settle
// the count on its own.
func ResolveExpected(ctx context.Context, o ExpectOptions, labels NodeLabels) (Expectation, bool, error) {
	if o.Count > 0 || labels == nil {
		return Expected(o, nil)
	}
	l, err := labels(ctx)
	if err != nil {
		return Expectation{}, false, fmt.Errorf("reading node labels for the expected device count: %w", err)
	}
	return Expected(o, l)
}

// DeviceNodes returns the numbers N of the entries <dir>/<prefix>N, sorted:
// /dev/nvidia0, /dev/nvidia1, ... but not /dev/nvidiactl or
// /dev/nvidia-uvm. A missing directory is no devices. Fixtures may use
// regular files: only the names count.
func DeviceNodes(dir, prefix string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ns []int
	for _, e := range entries {
		n, ok := DeviceNumber(e.Name(), prefix)
		if ok {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

// DeviceNumber parses "<prefix>N" with N a decimal number without sign or
// leading zeros (other than "0" itself).
func DeviceNumber(name, prefix string) (int, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || digits == "" || len(digits) > 6 || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// DevDir is the host's /dev under root.
func DevDir(root string) string { return filepath.Join(root, "dev") }
