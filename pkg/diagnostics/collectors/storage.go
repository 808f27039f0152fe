package collectors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catStorage = "storage"

func storage(e *Env) []collect.Collector {
	return []collect.Collector{
		filesCollector(e, catStorage, "mounts", 0, "proc/1/mountinfo", "proc/mounts", "etc/fstab"),
		{Name: "storage/filesystems", Category: catStorage, Run: e.filesystems},
		commandCollector(e, catStorage, "df", "df.txt", "df", "-PT"),
		commandCollector(e, catStorage, "df-inodes", "df-inodes.txt", "df", "-PTi"),
		{Name: "storage/block", Category: catStorage, Run: e.blockDevices},
		filesCollector(e, catStorage, "diskstats", 0, "proc/diskstats", "proc/partitions", "proc/mdstat"),
	}
}

// mount is one line of mountinfo.
type mount struct {
	point, fstype, source, options string
}

// parseMountinfo reads /proc/<pid>/mountinfo, leaving out the lines it
// cannot read: a bundle shows what it can.
func parseMountinfo(s string) []mount {
	var out []mount
	for _, l := range strings.Split(s, "\n") {
		e, err := mountinfo.ParseLine(l)
		if err != nil {
			continue
		}
		out = append(out, mount{point: e.Point, options: strings.Join(e.MountOptions, ","), fstype: e.FSType, source: e.Source})
	}
	return out
}

// diskFilesystems are the mounts whose usage matters: real and tmpfs
// filesystems, not pseudo-filesystems, container overlays or network mounts
// (statfs on a dead NFS server hangs).
func diskFilesystems(ms []mount) []mount {
	skip := map[string]bool{"proc": true, "sysfs": true, "cgroup": true, "cgroup2": true, "devpts": true, "mqueue": true,
		"debugfs": true, "tracefs": true, "securityfs": true, "pstore": true, "bpf": true, "configfs": true, "fusectl": true,
		"hugetlbfs": true, "autofs": true, "binfmt_misc": true, "rpc_pipefs": true, "nsfs": true, "overlay": true, "squashfs": true,
		"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "efivarfs": true, "selinuxfs": true, "ramfs": true}
	seen := map[string]bool{}
	var out []mount
	for _, m := range ms {
		if skip[m.fstype] || strings.HasPrefix(m.fstype, "fuse") || seen[m.point] {
			continue
		}
		// Pods' volumes and containers' mounts repeat the node's disks.
		if strings.Contains(m.point, "/kubelet/pods/") || strings.HasPrefix(m.point, "/run/containerd/") || strings.HasPrefix(m.point, "/run/netns/") {
			continue
		}
		seen[m.point] = true
		out = append(out, m)
	}
	return out
}

// fsUsage is a statfs result.
type fsUsage struct {
	size, used, avail, inodes, ifree uint64
}

func formatFilesystems(ms []mount, usage map[string]fsUsage, errs map[string]error) []byte {
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		if err, ok := errs[m.point]; ok {
			rows = append(rows, []string{m.point, m.fstype, m.source, "error: " + err.Error(), "", "", "", ""})
			continue
		}
		u := usage[m.point]
		pct, ipct := "-", "-"
		if u.size > 0 {
			pct = fmt.Sprintf("%.0f%%", 100*float64(u.used)/float64(u.used+u.avail))
		}
		if u.inodes > 0 {
			ipct = fmt.Sprintf("%.0f%%", 100*float64(u.inodes-u.ifree)/float64(u.inodes))
		}
		rows = append(rows, []string{m.point, m.fstype, m.source, bytecount.Human(int64(u.size)), bytecount.Human(int64(u.used)), bytecount.Human(int64(u.avail)), pct, ipct})
	}
	return table([]string{"MOUNT", "TYPE", "SOURCE", "SIZE", "USED", "AVAIL", "USE", "INODES_USED"}, rows)
}

// filesystems reports the usage of the host's disks: statfs under the host
// root on each mount of the host's init (what df would say on the host).
func (e *Env) filesystems(ctx context.Context, out *collect.Output) error {
	data, err := os.ReadFile(e.hostPath("proc/1/mountinfo"))
	if err != nil {
		return err
	}
	ms := diskFilesystems(parseMountinfo(string(data)))
	usage, errs := map[string]fsUsage{}, map[string]error{}
	for _, m := range ms {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(e.hostPath(m.point), &st); err != nil {
			errs[m.point] = err
			continue
		}
		bs := uint64(st.Bsize)
		usage[m.point] = fsUsage{size: st.Blocks * bs, used: (st.Blocks - st.Bfree) * bs, avail: st.Bavail * bs, inodes: st.Files, ifree: st.Ffree}
	}
	return out.WriteFile("filesystems.txt", formatFilesystems(ms, usage, errs))
}

// blockDev is one entry of /sys/block.
type blockDev struct {
	name, model, vendor, serial string
	sectors                     int64
	rotational, readOnly        bool
	removable                   bool
	scheduler                   string
}

func formatBlock(ds []blockDev) []byte {
	sort.Slice(ds, func(i, j int) bool { return ds[i].name < ds[j].name })
	rows := make([][]string, 0, len(ds))
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	for _, d := range ds {
		rows = append(rows, []string{d.name, bytecount.Human(d.sectors * 512), yn(d.rotational), yn(d.readOnly), yn(d.removable),
			strings.TrimSpace(d.vendor + " " + d.model), d.scheduler})
	}
	return table([]string{"NAME", "SIZE", "ROTATIONAL", "RO", "REMOVABLE", "MODEL", "SCHEDULER"}, rows)
}

func (e *Env) blockDevices(_ context.Context, out *collect.Output) error {
	entries, err := os.ReadDir(e.hostPath("sys/block"))
	if err != nil {
		if isNotExist(err) {
			return collect.Skip("no /sys/block")
		}
		return err
	}
	var ds []blockDev
	for _, de := range entries {
		dir := filepath.ToSlash(filepath.Join("sys/block", de.Name()))
		read := func(f string) string { v, _ := e.readHost(dir + "/" + f); return v }
		d := blockDev{name: de.Name(), model: read("device/model"), vendor: read("device/vendor"),
			rotational: read("queue/rotational") == "1", readOnly: read("ro") == "1", removable: read("removable") == "1"}
		d.sectors, _ = strconv.ParseInt(read("size"), 10, 64)
		d.scheduler = read("queue/scheduler")
		ds = append(ds, d)
		if st := read("stat"); st != "" {
			// Per-device I/O counters (Documentation/block/stat.rst).
			if err := out.WriteFile("block/"+de.Name()+".stat", []byte(st+"\n")); err != nil {
				return err
			}
		}
	}
	return out.WriteFile("block-devices.txt", formatBlock(ds))
}
