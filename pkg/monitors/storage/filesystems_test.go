package storage

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

// A mountinfo excerpt of an EKS AL2023 node (kernel 6.1), with the escapes
// the kernel writes for spaces and a stacked mount.
const realMountinfo = `22 1 259:1 / / rw,noatime shared:1 - xfs /dev/nvme0n1p1 rw,seclabel,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=1024,noquota
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw,seclabel
28 22 0:26 / /run rw,nosuid,nodev shared:12 - tmpfs tmpfs rw,seclabel,size=3236528k,nr_inodes=819200,mode=755,inode64
40 22 259:4 / /var/lib/containerd rw,noatime shared:20 - ext4 /dev/nvme1n1 rw,seclabel
52 22 0:45 / /mnt/my\040data rw,relatime shared:30 - nfs4 fs-0123.efs.us-east-1.amazonaws.com:/ rw,vers=4.1,rsize=1048576
61 40 0:52 / /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/5f3a/shm rw,nosuid,nodev,noexec,relatime shared:35 - tmpfs shm rw,seclabel,size=65536k,inode64
70 22 259:1 /var/lib/kubelet /var/lib/kubelet rw,noatime shared:1 - xfs /dev/nvme0n1p1 rw,attr2
71 70 259:1 /var/lib/kubelet /var/lib/kubelet ro,noatime shared:1 - xfs /dev/nvme0n1p1 rw,attr2
`

func TestParseMountinfo(t *testing.T) {
	ms, err := mountinfo.Parse([]byte(realMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 9 {
		t.Fatalf("%d mounts", len(ms))
	}
	nfs := ms[5]
	if nfs.Point != "/mnt/my data" || nfs.FSType != "nfs4" || nfs.Source != "fs-0123.efs.us-east-1.amazonaws.com:/" || nfs.Major != 0 || nfs.Minor != 45 {
		t.Fatalf("%+v", nfs)
	}
	root := ms[0]
	if root.Major != 259 || root.Minor != 1 || readOnly(root.MountOptions) || readOnly(root.SuperOptions) || root.SuperOptions[1] != "seclabel" {
		t.Fatalf("%+v", root)
	}
	for path, want := range map[string]string{
		"/":                           "/",
		"/var/lib/kubelet":            "/var/lib/kubelet",
		"/var/lib/kubelet/pods/x":     "/var/lib/kubelet",
		"/var/lib/kubeletx":           "/",
		"/var/lib/containerd":         "/var/lib/containerd",
		"/var/lib/containerd/io.x/y":  "/var/lib/containerd",
		"/mnt/my data/x":              "/mnt/my data",
		"/run/containerd/containerd":  "/run",
		"/var/lib/nodemend/probe/dir": "/",
	} {
		if i := coveringMount(ms, path); i < 0 || ms[i].Point != want {
			t.Errorf("coveringMount(%s) = %d, want %s", path, i, want)
		}
	}
	// Stacked on the same point: the topmost (last) wins.
	if i := coveringMount(ms, "/var/lib/kubelet"); i != 8 || !readOnly(ms[i].MountOptions) {
		t.Errorf("stacked mount: got %d", i)
	}
	if coveringMount(nil, "/") != -1 {
		t.Error("no mounts")
	}
	for _, bad := range []string{
		"22 1 259:1 / / rw,noatime - xfs",                   // no super options
		"22 1 259 / / rw - xfs /dev/x rw",                   // device without minor
		"22 1 259:x / / rw - xfs /dev/x rw",                 // bad minor
		"22 1 259:1 / relative rw - xfs /dev/x rw",          // relative mount point
		"22 1 259:1 / / rw shared:1 master:2 xfs /dev/x rw", // no separator
	} {
		if _, err := mountinfo.Parse([]byte(bad + "\n")); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestMountsCheck(t *testing.T) {
	errorRemount := func(m *hostroot.Mount) { m.SuperOptions = "ro,relatime" } // ext4 errors=remount-ro: the mount flag stays rw
	adminRemount := func(m *hostroot.Mount) { m.Options, m.SuperOptions = "ro,noatime", "ro" }
	for _, tc := range []struct {
		name   string
		ticks  [][]hostroot.Mount
		fs     []string
		want   string
		msg    string
		errSub string
	}{
		{name: "healthy node", ticks: [][]hostroot.Mount{nil}},
		{
			name:  "containerd's filesystem remounted read-only by the kernel",
			ticks: [][]hostroot.Mount{withMount("/var/lib/containerd", errorRemount)},
			want:  "FilesystemReadOnly//var/lib/containerd",
			msg:   "ext4 filesystem /dev/nvme1n1 on /var/lib/containerd, holding /var/lib/containerd, is read-only: the kernel remounted it read-only (superblock ro, mount rw)",
		},
		{
			name:  "root remounted read-only: every path on it is named once",
			ticks: [][]hostroot.Mount{withMount("/", errorRemount)},
			want:  "FilesystemReadOnly//",
			msg:   "holding /, /var/lib/kubelet, is read-only",
		},
		{
			name:  "an immutable root, read-only from the start (Bottlerocket)",
			ticks: [][]hostroot.Mount{withMount("/", adminRemount), withMount("/", adminRemount)},
		},
		{
			name:  "remounted read-only after it was seen writable",
			ticks: [][]hostroot.Mount{nil, withMount("/var/lib/containerd", adminRemount)},
			want:  "FilesystemReadOnly//var/lib/containerd",
			msg:   "it was writable earlier and was remounted read-only",
		},
		{
			name:  "and writable again",
			ticks: [][]hostroot.Mount{nil, withMount("/var/lib/containerd", adminRemount), nil},
		},
		{
			name:  "a read-only mount nobody depends on",
			ticks: [][]hostroot.Mount{append(withMount("/", func(*hostroot.Mount) {}), hostroot.Mount{ID: 90, ParentID: 22, Point: "/mnt/iso", Options: "ro", FSType: "iso9660", Source: "/dev/sr0", SuperOptions: "ro"})},
		},
		{
			name:  "a configured path on its own read-only mount",
			fs:    []string{"/data/kubelet"},
			ticks: [][]hostroot.Mount{append(withMount("/", func(*hostroot.Mount) {}), hostroot.Mount{ID: 90, ParentID: 22, Major: 259, Minor: 9, Point: "/data", Options: "rw", FSType: "xfs", Source: "/dev/mapper/data", SuperOptions: "ro", Device: "dm-3"})},
			want:  "FilesystemReadOnly//data",
			msg:   "xfs filesystem /dev/mapper/data (dm-3) on /data, holding /data/kubelet",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t)
			clk := clocktesting.NewFakePassiveClock(t0)
			m := New(testEnv(root, clk, nil), Options{Filesystems: tc.fs})
			var got string
			var last []string
			for _, ms := range tc.ticks {
				root.WithMounts(ms...)
				fs, err := runCheck(t, m, "storage-mounts")
				if err != nil {
					t.Fatal(err)
				}
				got = reasons(fs)
				last = nil
				for _, f := range fs {
					last = append(last, f.Message)
				}
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q (%q)", got, tc.want, last)
			}
			if tc.msg != "" && !strings.Contains(last[0], tc.msg) {
				t.Fatalf("message %q, want %q", last[0], tc.msg)
			}
		})
	}
}

func TestMountsCheckErrors(t *testing.T) {
	root := hostroot.New(t)
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	if _, err := runCheck(t, m, "storage-mounts"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no mountinfo: %v", err)
	}
	root.WriteFile("proc/1/mountinfo", "garbage\n")
	if _, err := runCheck(t, m, "storage-mounts"); err == nil {
		t.Fatal("garbage mountinfo accepted")
	}
	root.WithMounts(hostroot.Mount{ID: 1, Point: "/var", Options: "rw", FSType: "xfs", Source: "/dev/x", SuperOptions: "rw"})
	if _, err := runCheck(t, m, "storage-mounts"); err == nil || !strings.Contains(err.Error(), "no mount holds /") {
		t.Fatalf("got %v", err)
	}
}

func TestDevicesOfConfiguredPaths(t *testing.T) {
	root := hostroot.New(t).WithMounts()
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	if _, err := runCheck(t, m, "storage-mounts"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nvme0n1p1": "/", "nvme1n1": "/var/lib/containerd"}
	if len(m.devices) != len(want) || m.devices["nvme0n1p1"] != "/" || m.devices["nvme1n1"] != "/var/lib/containerd" {
		t.Fatalf("devices %v, want %v", m.devices, want)
	}
	// Without sysfs, the /dev source names the device.
	root.Remove("sys")
	if _, err := runCheck(t, m, "storage-mounts"); err != nil || m.devices["nvme1n1"] == "" {
		t.Fatalf("%v %v", m.devices, err)
	}
}

func TestEvalSpace(t *testing.T) {
	st := func(blocks, bfree, bavail, files, ffree uint64) unix.Statfs_t {
		return unix.Statfs_t{Bsize: 4096, Blocks: blocks, Bfree: bfree, Bavail: bavail, Files: files, Ffree: ffree}
	}
	for _, tc := range []struct {
		name string
		st   unix.Statfs_t
		want string
	}{
		{"healthy", st(1000, 700, 650, 1000, 900), ""},
		{"space at 80% (reserved blocks count as used, like df)", st(1050, 250, 200, 1000, 900), "80.0% of its space is used (800.0 KiB of 4.1 MiB available)"},
		{"inodes at 90%", st(1000, 700, 650, 1000, 100), "90.0% of its inodes are used (100 of 1000 free)"},
		{"both", st(1000, 50, 0, 1000, 0), "100.0% of its space is used (0 B of 3.9 MiB available) and 100.0% of its inodes are used"},
		{"a filesystem without inode accounting (btrfs reports 0)", st(1000, 700, 650, 0, 0), ""},
		{"pseudo filesystem", st(0, 0, 0, 0, 0), ""},
	} {
		u := usageOf(tc.st)
		u.Point, u.Paths = "/var/lib/kubelet", "/var/lib/kubelet"
		fs := evalSpace([]usage{u}, 80, t0)
		switch {
		case tc.want == "" && len(fs) != 0:
			t.Errorf("%s: %v", tc.name, fs)
		case tc.want != "" && (len(fs) != 1 || !strings.Contains(fs[0].Message, tc.want) || fs[0].Reason != health.ReasonFilesystemNearFull):
			t.Errorf("%s: %v, want %q", tc.name, fs, tc.want)
		}
	}
}

// TestSpaceCheckRealStatfs measures the fake root's real filesystem: the
// check works and deduplicates mounts; its verdict depends on this machine.
func TestSpaceCheckRealStatfs(t *testing.T) {
	root := hostroot.New(t).WithMounts()
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), map[string]float64{health.ReasonFilesystemNearFull: 100}), Options{})
	if fs, err := runCheck(t, m, "storage-space"); err != nil || len(fs) != 0 {
		t.Fatalf("%v, %v", fs, err)
	}
	m = New(testEnv(root, clocktesting.NewFakePassiveClock(t0), map[string]float64{health.ReasonFilesystemNearFull: 0.0001}), Options{})
	fs, err := runCheck(t, m, "storage-space")
	if err != nil || reasons(fs) != "FilesystemNearFull//,FilesystemNearFull//var/lib/containerd" {
		t.Fatalf("%v, %v", reasons(fs), err)
	}
	if !strings.Contains(fs[0].Message, "holding /, /var/lib/kubelet") {
		t.Fatalf("message %q", fs[0].Message)
	}
}
