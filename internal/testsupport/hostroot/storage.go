package hostroot

import (
	"fmt"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (Documentation/filesystems/proc.rst,
// "3.5 /proc/<pid>/mountinfo").
type Mount struct {
	ID, ParentID int
	// Major and Minor identify the block device (0 for tmpfs, overlay, ...).
	Major, Minor int
	// Point is the mount point, Options its per-mount options ("rw,relatime").
	Point, Options string
	FSType, Source string
	// SuperOptions are the superblock's options; a filesystem the kernel
	// remounted read-only after an error shows "ro" here.
	SuperOptions string
	// Device is the kernel's block device name (sys/dev/block/M:m/uevent
	// DEVNAME), what kmsg lines name: "nvme0n1p1", "dm-0". Empty for none.
	Device string
}

// DefaultMounts is the mount table WithMounts writes: an EKS-like node with
// XFS root on NVMe, a separate data volume for the container runtime, and
// the usual pseudo filesystems.
var DefaultMounts = []Mount{
	{ID: 22, ParentID: 1, Major: 259, Minor: 1, Point: "/", Options: "rw,noatime", FSType: "xfs", Source: "/dev/nvme0n1p1", SuperOptions: "rw,attr2,inode64,logbufs=8,logbsize=32k,noquota", Device: "nvme0n1p1"},
	{ID: 23, ParentID: 22, Point: "/proc", Options: "rw,nosuid,nodev,noexec,relatime", FSType: "proc", Source: "proc", SuperOptions: "rw"},
	{ID: 24, ParentID: 22, Point: "/sys", Options: "rw,nosuid,nodev,noexec,relatime", FSType: "sysfs", Source: "sysfs", SuperOptions: "rw"},
	{ID: 25, ParentID: 22, Point: "/run", Options: "rw,nosuid,nodev", FSType: "tmpfs", Source: "tmpfs", SuperOptions: "rw,size=3236528k,nr_inodes=819200,mode=755"},
	{ID: 40, ParentID: 22, Major: 259, Minor: 4, Point: "/var/lib/containerd", Options: "rw,noatime", FSType: "ext4", Source: "/dev/nvme1n1", SuperOptions: "rw", Device: "nvme1n1"},
	{ID: 41, ParentID: 25, Point: "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs", Options: "rw,relatime", FSType: "overlay", Source: "overlay", SuperOptions: "rw,lowerdir=/var/lib/containerd/x:/var/lib/containerd/y,upperdir=/var/lib/containerd/z,workdir=/var/lib/containerd/w"},
}

// WithMounts writes proc/1/mountinfo (the host's mount table as PID 1 sees
// it, which the agent reads whatever mount namespace it runs in) and, for
// each block device, sys/dev/block/<major>:<minor>/uevent. Nil means
// DefaultMounts.
func (r *Root) WithMounts(ms ...Mount) *Root {
	r.t.Helper()
	if ms == nil {
		ms = DefaultMounts
	}
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(MountinfoLine(m))
		if m.Major != 0 && m.Device != "" {
			r.WriteFile(fmt.Sprintf("sys/dev/block/%d:%d/uevent", m.Major, m.Minor),
				fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\nDEVTYPE=partition\n", m.Major, m.Minor, m.Device))
		}
	}
	r.WriteFile("proc/1/mountinfo", b.String())
	return r
}

// MountinfoLine formats m as the kernel does (fs/proc_namespace.c
// show_mountinfo), escaping space, tab, newline and backslash in paths as
// octal.
func MountinfoLine(m Mount) string {
	return fmt.Sprintf("%d %d %d:%d / %s %s shared:%d - %s %s %s\n",
		m.ID, m.ParentID, m.Major, m.Minor, escapeMount(m.Point), m.Options, m.ID, m.FSType, escapeMount(m.Source), m.SuperOptions)
}

func escapeMount(s string) string {
	return strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`).Replace(s)
}

// SetPSI writes /proc/pressure/<resource> (Documentation/accounting/psi.rst)
// with the given avg10/avg60/avg300 percentages for "some" and "full".
func (r *Root) SetPSI(resource string, some, full [3]float64) {
	r.t.Helper()
	r.WriteFile("proc/pressure/"+resource, fmt.Sprintf(
		"some avg10=%.2f avg60=%.2f avg300=%.2f total=%d\nfull avg10=%.2f avg60=%.2f avg300=%.2f total=%d\n",
		some[0], some[1], some[2], 123456789, full[0], full[1], full[2], 23456789))
}

// AddNVMeController writes sys/class/nvme/<name>/{model,serial} as the
// nvme driver pads them (space-filled to the Identify Controller field
// widths, 40 and 20 bytes) and a placeholder dev/<name>. EBS volumes have
// model "Amazon Elastic Block Store" and the volume ID without its dash as
// serial ("vol0123456789abcdef0").
func (r *Root) AddNVMeController(name, model, serial string) {
	r.t.Helper()
	r.WriteFile("sys/class/nvme/"+name+"/model", fmt.Sprintf("%-40s\n", model))
	r.WriteFile("sys/class/nvme/"+name+"/serial", fmt.Sprintf("%-20s\n", serial))
	r.WriteFile("dev/"+name, "")
}
