package storage

import (
	"fmt"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// kubeletUnit is the kubelet's systemd unit.
const kubeletUnit = "kubelet.service"

// notRealDisks are devices whose I/O errors say nothing about the node's
// storage: the floppy and CD-ROM drives hypervisors emulate (a read at boot
// fails on most VMs) and loop devices of snaps and images.
var notRealDisks = []string{"dev fd0", "dev sr0", "dev sr1", "dev loop", "on dev fd0", "on device fd0", "on dev sr0", "on dev loop", "on device loop"}

// Rules returns the storage monitor's log rules. Formats are those of the
// kernel source files named in each comment (Linux 4.14 through 6.x) and of
// the kubelet.
func Rules() []logline.Rule {
	kmsg := []logline.Source{logline.Kmsg}
	kernel := []logline.Provenance{logline.ByKernel}
	return []logline.Rule{
		// --- BlockDeviceIOError ----------------------------------------------
		// block/blk-core.c (blk-mq.c since 5.16) blk_print_req_error():
		//   5.x:  "blk_update_request: I/O error, dev nvme1n1, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0"
		//   6.x:  "I/O error, dev nvme1n1, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2"
		//   4.x:  "print_req_error: I/O error, dev xvdf, sector 8"; 2.6/3.x "end_request: I/O error, dev sde, sector 52428288"
		// and the other blk_errors[] names ("critical medium error", ...).
		{
			Reason:   health.ReasonBlockDeviceIOError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" error, dev "},
			Pattern:  `(?:^|: )(?P<kind>I/O|critical medium|critical target|critical nexus|critical space allocation|recoverable transport|timeout) error, dev (?P<dev>[^,\s]+), sector (?P<sector>\d+)`,
			Exclude:  notRealDisks,
			Message:  "${kind} error on block device ${dev} at sector ${sector}",
		},
		// fs/buffer.c buffer_io_error() / end_buffer_async_write():
		//   "Buffer I/O error on dev nvme1n1p1, logical block 1234, lost async page write"
		//   older: "Buffer I/O error on device sdb1, logical block 0"
		{
			Reason:   health.ReasonBlockDeviceIOError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Buffer I/O error on dev"},
			Pattern:  `Buffer I/O error on dev(?:ice)? (?P<dev>[^,\s]+), logical block (?P<block>\d+)`,
			Exclude:  notRealDisks,
			Message:  "I/O error on block device ${dev} at logical block ${block} (buffer cache)",
		},

		// --- FilesystemShutdown (XFS) ----------------------------------------
		// fs/xfs/xfs_fsops.c xfs_do_force_shutdown():
		//   6.x: "XFS (nvme0n1p1): Corruption of in-memory data (0x8) detected at xfs_trans_cancel+0x14f/0x190 [xfs] (fs/xfs/xfs_trans.c:1097).  Shutting down filesystem."
		//        "XFS (dm-0): Log I/O error (0x2) detected at xlog_ioend_work+0x6e/0x70 [xfs] (fs/xfs/xfs_log.c:1378).  Shutting down filesystem."
		//   4.x/5.x: "XFS (sda1): Log I/O Error Detected. Shutting down filesystem"
		//            "XFS (sda1): I/O Error Detected. Shutting down filesystem"
		// Interpret makes it Fatal only for a device a configured path is on.
		{
			Reason:   health.ReasonFilesystemShutdown,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"XFS (", "Shutting down filesystem"},
			Pattern:  `^XFS \((?P<dev>[^)]+)\): (?P<what>.*?)\.? +Shutting down filesystem`,
			Message:  "XFS on ${dev} shut down: ${what}",
		},
		// 6.x also logs, after the above: "XFS (dm-0): Filesystem has been shut down due to log error (0x2)."
		{
			Reason:   health.ReasonFilesystemShutdown,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"XFS (", "Filesystem has been shut down due to "},
			Pattern:  `^XFS \((?P<dev>[^)]+)\): Filesystem has been shut down due to (?P<what>[^(.]*[^(.\s])`,
			Message:  "XFS on ${dev} shut down due to ${what}",
		},

		// --- FilesystemError -------------------------------------------------
		// fs/ext4/super.c __ext4_error():
		//   "EXT4-fs error (device nvme1n1): ext4_find_entry:1463: inode #2: comm ls: reading directory lblock 0"
		{
			Reason:   health.ReasonFilesystemError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"EXT4-fs error (device "},
			Pattern:  `EXT4-fs error \(device (?P<dev>[^)]+)\): (?P<what>.*)`,
			Message:  "ext4 error on ${dev}: ${what}",
		},
		// ext4_handle_error() with errors=remount-ro:
		//   "EXT4-fs (nvme1n1): Remounting filesystem read-only"
		{
			Reason:   health.ReasonFilesystemError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"EXT4-fs (", "Remounting filesystem read-only"},
			Pattern:  `EXT4-fs \((?P<dev>[^)]+)\): Remounting filesystem read-only`,
			Message:  "ext4 on ${dev} was remounted read-only after an error",
		},
		// fs/jbd2/journal.c jbd2_journal_abort(): "Aborting journal on device nvme1n1-8."
		{
			Reason:   health.ReasonFilesystemError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Aborting journal on device "},
			Pattern:  `Aborting journal on device (?P<dev>[^\s-]+)(?:-\d+)?`,
			Message:  "the ext4 journal on ${dev} was aborted",
		},
		// fs/xfs/xfs_message.c xfs_corruption_error() / xfs_verifier_error():
		//   "XFS (nvme1n1): Metadata corruption detected at xfs_dinode_verify+0x.../0x... [xfs], inode 0x2a1 dinode"
		//   "XFS (sda1): Metadata CRC error detected at xfs_agf_read_verify+0x..., xfs_agf block 0x..."
		//   "XFS (sda1): Corruption detected. Unmount and run xfs_repair"
		{
			Reason:   health.ReasonFilesystemError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"XFS (", " detected"},
			Pattern:  `^XFS \((?P<dev>[^)]+)\): (?P<what>Metadata corruption detected|Metadata CRC error detected|Corruption detected)`,
			Message:  "XFS on ${dev}: ${what}",
		},
		// fs/xfs/xfs_error.c xfs_error_report(): "XFS (sda1): Internal error XFS_WANT_CORRUPTED_GOTO at line 1423 of file fs/xfs/libxfs/xfs_alloc.c.  Caller ..."
		{
			Reason:   health.ReasonFilesystemError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"XFS (", "): Internal error "},
			Pattern:  `^XFS \((?P<dev>[^)]+)\): Internal error (?P<what>\S+)`,
			Message:  "XFS on ${dev}: internal error ${what}",
		},

		// --- EtcHostsMountFailed ----------------------------------------------
		// The OCI runtime fails to bind-mount the kubelet's generated hosts
		// file into a container. runc (libcontainer/rootfs_linux.go) since
		// 1.1: `error mounting %q to rootfs at %q: %w`; 1.0: `mounting %q to
		// rootfs at %q caused: %w`; earlier `mounting %q to rootfs %q at %q
		// caused %q`. The kubelet and containerd log it inside their own
		// quoted error strings, so the quotes carry one or more backslashes:
		//   kubelet:    ... error mounting \"/var/lib/kubelet/pods/3f1c.../etc-hosts\" to rootfs at \"/etc/hosts\": mount ...: not a directory: unknown
		//   containerd: ... error mounting \\\"/var/lib/kubelet/pods/3f1c.../etc-hosts\\\" to rootfs at \\\"/etc/hosts\\\": ...
		{
			Reason:   health.ReasonEtcHostsMountFailed,
			Sources:  []logline.Source{logline.Journal},
			Accept:   logline.ByUnits(kubeletUnit, "containerd.service", "crio.service"),
			Contains: []string{" to rootfs ", "etc-hosts"},
			Pattern:  `mounting \\*"(?P<src>[^"\\]*/pods/(?P<uid>[0-9a-f-]+)/etc-hosts)\\*" to rootfs (?:\\*"[^"\\]*\\*" )?at \\*"[^"\\]*/etc/hosts\\*"`,
			Message:  "a container of pod ${uid} could not start: the kubelet's ${src} could not be mounted at /etc/hosts (typically /var/lib/kubelet/pods was remounted, by user data for instance, and the file is now a directory)",
		},

		// --- KubeletDiskUsageSlow --------------------------------------------
		// pkg/volume/util/fs/fs.go (kubelet), logged at info level when the
		// du/find of a pod volume is slow:
		//   `fs: disk usage and inodes count on following dirs took 1.3s: [/var/lib/kubelet/pods/.../volumes/kubernetes.io~empty-dir/data]; will not log again for this container unless duration exceeds 2s`
		{
			Reason:   health.ReasonKubeletDiskUsageSlow,
			Sources:  []logline.Source{logline.Journal},
			Accept:   logline.ByUnits(kubeletUnit),
			Contains: []string{"fs: disk usage and inodes count on following dirs took "},
			Pattern:  `fs: disk usage and inodes count on following dirs took (?P<took>[0-9.]+[µmn]?s)`,
			Message:  "the kubelet's disk usage scan of pod volumes took ${took}: storage is slow or overloaded",
		},
	}
}

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor. An XFS shutdown is Fatal only when
// its device holds a configured path (the mount check keeps that map); a
// shutdown of another device, a pod's volume for instance, is the
// workload's problem and becomes a FilesystemError Warning.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	dev := match.Groups["dev"]
	f := detection.Finding{Reason: match.Reason, Message: match.Message, Observed: match.Line.Time, Subject: dev}
	switch match.Reason {
	case health.ReasonKubeletDiskUsageSlow:
		f.Subject = kubeletUnit
	case health.ReasonEtcHostsMountFailed:
		f.Subject = match.Groups["uid"]
	}
	if match.Reason == health.ReasonFilesystemShutdown {
		m.mu.Lock()
		path, depended := m.devices[dev]
		m.mu.Unlock()
		if depended {
			f.Message = fmt.Sprintf("%s, which holds %s: every access to it now fails until it is unmounted and repaired", match.Message, path)
		} else {
			f.Reason = health.ReasonFilesystemError
			f.Message = match.Message + " (no configured path is on it)"
		}
	}
	return []detection.Finding{f}
}
