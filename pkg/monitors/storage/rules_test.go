package storage

import (
	"context"
	"slices"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

func kmsg(text string) logline.Line { return monitortest.Kernel(text, t0) }

func journal(unit, text string) logline.Line { return monitortest.Unit(unit, text, t0) }

type ruleCase struct {
	name string
	line logline.Line
	want []detection.Finding
}

func finding(reason, subject, msg string) []detection.Finding {
	return []detection.Finding{{Reason: reason, Subject: subject, Message: msg, Observed: t0}}
}

// ruleCases are interpreted by a monitor whose mount check saw
// hostroot.DefaultMounts: nvme0n1p1 holds / and /var/lib/kubelet, nvme1n1
// holds /var/lib/containerd.
var ruleCases = []ruleCase{
	// --- BlockDeviceIOError ---
	{
		name: "I/O error, 6.x",
		line: kmsg("I/O error, dev nvme1n1, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2"),
		want: finding(health.ReasonBlockDeviceIOError, "nvme1n1", "I/O error on block device nvme1n1 at sector 2048"),
	},
	{
		name: "I/O error, 5.x blk_update_request",
		line: kmsg("blk_update_request: I/O error, dev xvdf, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0"),
		want: finding(health.ReasonBlockDeviceIOError, "xvdf", "I/O error on block device xvdf at sector 8"),
	},
	{
		name: "I/O error, 2.6/3.x end_request",
		line: kmsg("end_request: I/O error, dev sde, sector 52428288"),
		want: finding(health.ReasonBlockDeviceIOError, "sde", "I/O error on block device sde at sector 52428288"),
	},
	{
		name: "critical medium error",
		line: kmsg("critical medium error, dev sdb, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2"),
		want: finding(health.ReasonBlockDeviceIOError, "sdb", "critical medium error on block device sdb at sector 123456"),
	},
	{
		name: "buffer I/O error",
		line: kmsg("Buffer I/O error on dev nvme1n1p1, logical block 1234, lost async page write"),
		want: finding(health.ReasonBlockDeviceIOError, "nvme1n1p1", "I/O error on block device nvme1n1p1 at logical block 1234 (buffer cache)"),
	},
	{
		name: "buffer I/O error, older wording",
		line: kmsg("Buffer I/O error on device sdb1, logical block 0"),
		want: finding(health.ReasonBlockDeviceIOError, "sdb1", "I/O error on block device sdb1 at logical block 0 (buffer cache)"),
	},
	{name: "the emulated floppy every VM has", line: kmsg("blk_update_request: I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0")},
	{name: "the emulated CD-ROM", line: kmsg("I/O error, dev sr0, sector 0 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2")},
	{name: "a loop device", line: kmsg("Buffer I/O error on dev loop3, logical block 0, async page read")},
	{name: "an error that is not an I/O error", line: kmsg("nvme nvme0: I/O 123 QID 4 timeout, aborting")},

	// --- FilesystemShutdown / FilesystemError ---
	{
		name: "XFS shutdown of the root filesystem, 6.x",
		line: kmsg("XFS (nvme0n1p1): Corruption of in-memory data (0x8) detected at xfs_trans_cancel+0x14f/0x190 [xfs] (fs/xfs/xfs_trans.c:1097).  Shutting down filesystem."),
		want: finding(health.ReasonFilesystemShutdown, "nvme0n1p1",
			"XFS on nvme0n1p1 shut down: Corruption of in-memory data (0x8) detected at xfs_trans_cancel+0x14f/0x190 [xfs] (fs/xfs/xfs_trans.c:1097), which holds /: every access to it now fails until it is unmounted and repaired"),
	},
	{
		name: "XFS shutdown, 5.x wording",
		line: kmsg("XFS (nvme0n1p1): Log I/O Error Detected. Shutting down filesystem"),
		want: finding(health.ReasonFilesystemShutdown, "nvme0n1p1",
			"XFS on nvme0n1p1 shut down: Log I/O Error Detected, which holds /: every access to it now fails until it is unmounted and repaired"),
	},
	{
		name: "XFS shutdown summary line, 6.x",
		line: kmsg("XFS (nvme0n1p1): Filesystem has been shut down due to log error (0x2)."),
		want: finding(health.ReasonFilesystemShutdown, "nvme0n1p1",
			"XFS on nvme0n1p1 shut down due to log error, which holds /: every access to it now fails until it is unmounted and repaired"),
	},
	{
		name: "XFS shutdown of a pod's volume is the workload's",
		line: kmsg("XFS (nvme3n1): Log I/O Error Detected. Shutting down filesystem"),
		want: finding(health.ReasonFilesystemError, "nvme3n1", "XFS on nvme3n1 shut down: Log I/O Error Detected (no configured path is on it)"),
	},
	{
		name: "XFS advice line",
		line: kmsg("XFS (nvme0n1p1): Please unmount the filesystem and rectify the problem(s)"),
	},
	{
		name: "ext4 error",
		line: kmsg("EXT4-fs error (device nvme1n1): ext4_find_entry:1463: inode #2: comm ls: reading directory lblock 0"),
		want: finding(health.ReasonFilesystemError, "nvme1n1", "ext4 error on nvme1n1: ext4_find_entry:1463: inode #2: comm ls: reading directory lblock 0"),
	},
	{
		name: "ext4 remount read-only",
		line: kmsg("EXT4-fs (nvme1n1): Remounting filesystem read-only"),
		want: finding(health.ReasonFilesystemError, "nvme1n1", "ext4 on nvme1n1 was remounted read-only after an error"),
	},
	{
		name: "jbd2 journal abort",
		line: kmsg("Aborting journal on device nvme1n1-8."),
		want: finding(health.ReasonFilesystemError, "nvme1n1", "the ext4 journal on nvme1n1 was aborted"),
	},
	{
		name: "XFS metadata corruption",
		line: kmsg("XFS (nvme1n1): Metadata corruption detected at xfs_dinode_verify+0xa0/0x5c0 [xfs], inode 0x2a1 dinode"),
		want: finding(health.ReasonFilesystemError, "nvme1n1", "XFS on nvme1n1: Metadata corruption detected"),
	},
	{
		name: "XFS internal error",
		line: kmsg("XFS (sda1): Internal error XFS_WANT_CORRUPTED_GOTO at line 1423 of file fs/xfs/libxfs/xfs_alloc.c.  Caller xfs_free_ag_extent+0x3c3/0x800 [xfs]"),
		want: finding(health.ReasonFilesystemError, "sda1", "XFS on sda1: internal error XFS_WANT_CORRUPTED_GOTO"),
	},
	{name: "a routine ext4 mount", line: kmsg("EXT4-fs (nvme1n1): mounted filesystem 4f1c2d3e-... r/w with ordered data mode. Quota mode: none.")},
	{name: "a routine XFS mount", line: kmsg("XFS (nvme0n1p1): Ending clean mount")},

	// --- EtcHostsMountFailed ---
	{
		name: "kubelet: runc 1.1+ error inside a klog err string",
		line: journal("kubelet.service", `E0314 09:26:53.123456    2140 pod_workers.go:1301] "Error syncing pod, skipping" err="failed to \"StartContainer\" for \"app\" with RunContainerError: \"failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting \\\"/var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts\\\" to rootfs at \\\"/etc/hosts\\\": mount /var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts:/etc/hosts (via /proc/self/fd/6), flags: 0x5001: not a directory: unknown\"" pod="default/web-0" podUID="3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31"`),
		want: finding(health.ReasonEtcHostsMountFailed, "3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31", "a container of pod 3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31 could not start: the kubelet's /var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts could not be mounted at /etc/hosts (typically /var/lib/kubelet/pods was remounted, by user data for instance, and the file is now a directory)"),
	},
	{
		name: "containerd: its own quoting",
		line: journal("containerd.service", `time="2026-03-14T09:26:53.120000000Z" level=error msg="StartContainer for \"9b8c7d6e5f4a\" failed" error="failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting \"/var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts\" to rootfs at \"/etc/hosts\": mount /var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts:/etc/hosts (via /proc/self/fd/6), flags: 0x5001: not a directory: unknown"`),
		want: finding(health.ReasonEtcHostsMountFailed, "3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31", "a container of pod 3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31 could not start: the kubelet's /var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts could not be mounted at /etc/hosts (typically /var/lib/kubelet/pods was remounted, by user data for instance, and the file is now a directory)"),
	},
	{
		name: "runc before 1.0: rootfs and target spelled out",
		line: journal("kubelet.service", `E0314 09:26:53.123456    2140 remote_runtime.go:251] StartContainer "4f3e2d1c0b9a" from runtime service failed: rpc error: code = Unknown desc = failed to create containerd task: OCI runtime create failed: container_linux.go:349: starting container process caused "process_linux.go:449: container init caused \"rootfs_linux.go:58: mounting \\\"/var/lib/kubelet/pods/5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/etc-hosts\\\" to rootfs \\\"/run/containerd/io.containerd.runtime.v2.task/k8s.io/4f3e2d1c0b9a/rootfs\\\" at \\\"/run/containerd/io.containerd.runtime.v2.task/k8s.io/4f3e2d1c0b9a/rootfs/etc/hosts\\\" caused \\\"not a directory\\\"\"": unknown`),
		want: finding(health.ReasonEtcHostsMountFailed, "5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "a container of pod 5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b could not start: the kubelet's /var/lib/kubelet/pods/5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/etc-hosts could not be mounted at /etc/hosts (typically /var/lib/kubelet/pods was remounted, by user data for instance, and the file is now a directory)"),
	},
	{
		name: "another bind mount of the pod failing is not this fault",
		line: journal("kubelet.service", `E0314 09:26:53.123456    2140 pod_workers.go:1301] "Error syncing pod, skipping" err="... error mounting \"/var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/volumes/kubernetes.io~configmap/cfg\" to rootfs at \"/etc/app\": ... no such file or directory: unknown"`),
	},
	{
		name: "the kubelet writing etc-hosts is routine",
		line: journal("kubelet.service", `I0314 09:26:53.123456    2140 kubelet_pods.go:301] "Creating hosts mount for container" pod="default/web-0" containerName="app" podIPs=["10.0.1.23"] path=true`),
	},
	{
		name: "a workload's journal line is not the runtime's",
		line: journal("myapp.service", `error mounting "/var/lib/kubelet/pods/3f1c2b9a-8d4e-4c1a-9f0e-2b7d6c5a4e31/etc-hosts" to rootfs at "/etc/hosts": not a directory`),
	},

	// --- KubeletDiskUsageSlow ---
	{
		name: "slow du of a pod volume",
		line: journal("kubelet.service", `I0314 09:26:53.123456    1034 fs.go:62] "fs: disk usage and inodes count on following dirs took 1.337s: [/var/lib/kubelet/pods/5f3a/volumes/kubernetes.io~empty-dir/data]; will not log again for this container unless duration exceeds 2s"`),
		want: finding(health.ReasonKubeletDiskUsageSlow, "kubelet.service", "the kubelet's disk usage scan of pod volumes took 1.337s: storage is slow or overloaded"),
	},
	{
		name: "the same words from a workload unit",
		line: journal("myapp.service", "fs: disk usage and inodes count on following dirs took 2s"),
	},
}

func ruleMonitor(t *testing.T) *Monitor {
	t.Helper()
	root := hostroot.New(t).WithMounts()
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	if _, err := runCheck(t, m, "storage-mounts"); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRules(t *testing.T) {
	m := ruleMonitor(t)
	mt, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			var got []detection.Finding
			mt.Match(tc.line, func(match logline.Match) { got = append(got, m.Interpret(match)...) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("line %q\n got %+v\nwant %+v", tc.line.Text, got, tc.want)
			}
		})
	}
}

// TestShutdownBeforeTheMountCheck: until the mount check has run the
// monitor cannot tell whose device it is, and errs on the Warning side.
func TestShutdownBeforeTheMountCheck(t *testing.T) {
	m := New(detection.Env{HostRoot: t.TempDir()}, Options{})
	mt, _ := rules.Compile(m.Rules())
	var got []detection.Finding
	mt.Match(kmsg("XFS (nvme0n1p1): Log I/O Error Detected. Shutting down filesystem"), func(match logline.Match) { got = append(got, m.Interpret(match)...) })
	if len(got) != 1 || got[0].Reason != health.ReasonFilesystemError {
		t.Fatalf("%v", got)
	}
}

func TestEveryRuleHasAPositiveCase(t *testing.T) {
	var positives []logline.Line
	for _, tc := range ruleCases {
		if tc.want != nil {
			positives = append(positives, tc.line)
		}
	}
	monitortest.EveryRuleMatches(t, Rules(), positives)
	monitortest.NoForgeryMatches(t, Rules(), positives)
}

func TestRegistryCoverage(t *testing.T) {
	// FilesystemError also comes from Interpret (XFS shutdown lines).
	monitortest.RegistryCoverage(t, New(detection.Env{HostRoot: t.TempDir()}, Options{}), health.StorageReady, health.ReasonFilesystemError)
}

// TestThisMachineRaisesNothing runs every check against the machine the
// test runs on: its real mount table, statfs, PSI and sysfs (no NVMe
// here). The write probe writes in a temporary directory, not in
// /var/lib/nodemend of this machine.
func TestThisMachineRaisesNothing(t *testing.T) {
	m := New(detection.Env{}, Options{ProbeDir: t.TempDir() + "/probe"})
	for _, c := range m.Checks() {
		for range 2 {
			fs, err := c.Run(context.Background())
			if err != nil || len(fs) != 0 {
				t.Errorf("%s on this machine: %v, %v", c.Name, fs, err)
			}
		}
	}
}
