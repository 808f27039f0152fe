package collectors

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catBase = "base"

func base(e *Env) []collect.Collector {
	return []collect.Collector{
		{Name: "base/summary", Category: catBase, Run: func(_ context.Context, out *collect.Output) error {
			return out.WriteFile("summary.txt", e.summary())
		}},
		filesCollector(e, catBase, "os", 0,
			"etc/os-release", "usr/lib/os-release", "etc/system-release", "etc/hostname", "etc/machine-id",
			"proc/version", "proc/cmdline", "proc/sys/kernel/hostname", "proc/sys/kernel/osrelease", "proc/uptime", "proc/loadavg"),
		filesCollector(e, catBase, "hardware", 0, "proc/cpuinfo", "proc/meminfo",
			"sys/class/dmi/id/sys_vendor", "sys/class/dmi/id/product_name", "sys/class/dmi/id/product_uuid",
			"sys/class/dmi/id/board_vendor", "sys/class/dmi/id/board_name", "sys/class/dmi/id/bios_version",
			"sys/class/dmi/id/chassis_asset_tag", "sys/hypervisor/uuid"),
		{Name: "base/node", Category: catBase, Run: func(ctx context.Context, out *collect.Output) error {
			if e.Client == nil {
				return collect.Skip("no API client")
			}
			n, err := e.Client.GetNode(ctx, e.NodeName)
			if err != nil {
				return err
			}
			n.ManagedFields = nil
			data, err := yaml.Marshal(n)
			if err != nil {
				return err
			}
			return out.WriteFile("node.yaml", data)
		}},
		cloudMetadata(e),
	}
}

// summary is a few lines a human reads first.
func (e *Env) summary() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "node:      %s\n", e.NodeName)
	fmt.Fprintf(&b, "captured:  %s\n", e.Now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "logs from: %s\n", e.Since.UTC().Format(time.RFC3339))
	if v, err := e.readHost("etc/os-release"); err == nil {
		fmt.Fprintf(&b, "os:        %s\n", osPrettyName(v))
	}
	if v, err := e.readHost("proc/sys/kernel/osrelease"); err == nil {
		fmt.Fprintf(&b, "kernel:    %s\n", v)
	}
	if v, err := e.readHost("proc/uptime"); err == nil {
		if d, ok := parseUptime(v); ok {
			fmt.Fprintf(&b, "uptime:    %s (booted %s)\n", d, e.Now.Add(-d).UTC().Format(time.RFC3339))
		}
	}
	if v, err := e.readHost("proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "loadavg:   %s\n", v)
	}
	return b.Bytes()
}

// osPrettyName returns PRETTY_NAME (or NAME) of an os-release file.
func osPrettyName(osRelease string) string {
	var name string
	for _, l := range strings.Split(osRelease, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "PRETTY_NAME":
			return v
		case "NAME":
			name = v
		}
	}
	return name
}

// parseUptime reads /proc/uptime ("350735.47 2765328.42"), rounded to the
// second.
func parseUptime(s string) (time.Duration, bool) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, false
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil || sec < 0 {
		return 0, false
	}
	return time.Duration(sec) * time.Second, true
}
