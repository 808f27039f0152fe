package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

// Outputs of xfs_db 6.1 `freesp -s` (xfsprogs db/freesp.c): a histogram of
// free extents by size, then the summary. xfsHealthy is a freshly made
// 300 MiB filesystem; xfsAging the same after 20,000 4 KiB files were
// written and every other one deleted; xfsFragmented a volume whose free
// space is mostly single blocks.
const (
	xfsHealthy = `   from      to extents  blocks    pct
      1       1      16      16   0.03
      4       7       1       6   0.01
   2048    4095       1    2806   4.65
  16384   19200       3   57556  95.32
total free extents 21
total free blocks 60384
average free extent size 2875.43
`
	xfsAging = `   from      to extents  blocks    pct
      1       1    1519    1519   2.81
      2       3       4       8   0.01
      4       7       1       6   0.01
     16      31       1      31   0.06
    256     511       1     340   0.63
   2048    4095       1    3697   6.84
   8192   16383       2   27955  51.76
  16384   20480       1   20456  37.87
total free extents 1530
total free blocks 54012
average free extent size 35.302
`
	xfsFragmented = `   from      to extents  blocks    pct
      1       1  812344  812344  61.02
      2       3  210377  483867  36.35
      4       7    6211   31055   2.33
      8      15     402    3981   0.30
total free extents 1029334
total free blocks 1331247
average free extent size 1.29331
`
	// A filesystem without free space: xfs_db divides by zero.
	xfsFull = `   from      to extents  blocks    pct
total free extents 0
total free blocks 0
average free extent size -nan
`
)

// freeSpaceScript answers FreeSpaceSummary from a table by device path and
// records the calls.
type freeSpaceScript struct {
	mu    sync.Mutex
	out   map[string]string
	err   map[string]error
	calls []string
}

func (f *freeSpaceScript) FreeSpaceSummary(_ context.Context, device string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, device)
	if err := f.err[device]; err != nil {
		return nil, err
	}
	out, ok := f.out[device]
	if !ok {
		return nil, fmt.Errorf("xfs_db: %s: No such file or directory", device)
	}
	return []byte(out), nil
}

// xfsMounts: XFS root on nvme0n1p1 (also bind-mounted for the kubelet), an
// XFS data volume on nvme2n1, ext4 for containerd.
func xfsMounts() []hostroot.Mount {
	return append(append([]hostroot.Mount(nil), hostroot.DefaultMounts...),
		hostroot.Mount{ID: 50, ParentID: 22, Major: 259, Minor: 1, Point: "/var/lib/kubelet", Options: "rw,noatime", FSType: "xfs", Source: "/dev/nvme0n1p1", SuperOptions: "rw,attr2,inode64", Device: "nvme0n1p1"},
		hostroot.Mount{ID: 51, ParentID: 22, Major: 259, Minor: 7, Point: "/data", Options: "rw,noatime", FSType: "xfs", Source: "/dev/nvme2n1", SuperOptions: "rw,attr2,inode64,logbufs=8", Device: "nvme2n1"},
	)
}

func TestXFSFreeSpaceCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mounts    []hostroot.Mount
		out       map[string]string
		err       map[string]error
		thr       float64
		want      string
		wantMsg   string
		wantCalls string
		wantErr   bool
	}{
		{
			name:   "no XFS mounted: nothing read, nothing reported",
			mounts: withMount("/", func(m *hostroot.Mount) { m.FSType = "ext4" }),
		},
		{
			name:      "healthy and aging filesystems",
			mounts:    xfsMounts(),
			out:       map[string]string{"/dev/nvme0n1p1": xfsHealthy, "/dev/nvme2n1": xfsAging},
			wantCalls: "/dev/nvme0n1p1,/dev/nvme2n1",
		},
		{
			name:      "a fragmented filesystem, named with all its mount points",
			mounts:    xfsMounts(),
			out:       map[string]string{"/dev/nvme0n1p1": xfsFragmented, "/dev/nvme2n1": xfsHealthy},
			want:      health.ReasonXFSSmallAverageClusterSize + "/nvme0n1p1",
			wantMsg:   "XFS on /dev/nvme0n1p1 (/, /var/lib/kubelet): the average free extent is 1.3 blocks (threshold 16) over 1029334 free extents, 1331247 free blocks",
			wantCalls: "/dev/nvme0n1p1,/dev/nvme2n1",
		},
		{
			name:   "configured threshold",
			mounts: xfsMounts(),
			out:    map[string]string{"/dev/nvme0n1p1": xfsHealthy, "/dev/nvme2n1": xfsAging},
			thr:    64,
			want:   health.ReasonXFSSmallAverageClusterSize + "/nvme2n1",
		},
		{
			name:   "a full filesystem is not fragmented",
			mounts: xfsMounts(),
			out:    map[string]string{"/dev/nvme0n1p1": xfsFull, "/dev/nvme2n1": xfsHealthy},
		},
		{
			name:    "xfs_db missing on a node with XFS is an error, not a verdict",
			mounts:  xfsMounts(),
			err:     map[string]error{"/dev/nvme0n1p1": ErrNoXFSDB, "/dev/nvme2n1": ErrNoXFSDB},
			wantErr: true,
		},
		{
			name:    "output without a summary",
			mounts:  xfsMounts(),
			out:     map[string]string{"/dev/nvme0n1p1": "xfs_db: cannot init perag data (5). Continuing anyway.\n", "/dev/nvme2n1": xfsHealthy},
			wantErr: true,
		},
		{
			name:    "malformed summary",
			mounts:  xfsMounts(),
			out:     map[string]string{"/dev/nvme0n1p1": strings.Replace(xfsHealthy, "extents 21", "extents twenty", 1), "/dev/nvme2n1": xfsHealthy},
			wantErr: true,
		},
		{name: "invalid threshold", mounts: xfsMounts(), thr: -1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithMounts(tc.mounts...)
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonXFSSmallAverageClusterSize] = tc.thr
			}
			script := &freeSpaceScript{out: tc.out, err: tc.err}
			m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), thr), Options{FreeSpace: script})
			fs, err := runCheck(t, m, "storage-xfs-free-space")
			if tc.wantErr {
				if err == nil || len(fs) != 0 {
					t.Fatalf("want an error, got %v, %v", fs, err)
				}
				t.Logf("error: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := reasons(fs); got != tc.want {
				t.Fatalf("findings %q, want %q (%v)", got, tc.want, fs)
			}
			if tc.wantMsg != "" && !strings.HasPrefix(fs[0].Message, tc.wantMsg) {
				t.Fatalf("message %q\nwant prefix %q", fs[0].Message, tc.wantMsg)
			}
			if tc.wantCalls != "" && strings.Join(script.calls, ",") != tc.wantCalls {
				t.Fatalf("xfs_db ran on %v, want %s", script.calls, tc.wantCalls)
			}
			if len(tc.out) == 0 && len(script.calls) != 0 {
				t.Fatalf("xfs_db ran on a node without XFS: %v", script.calls)
			}
		})
	}
}

// The real xfs_db on a real XFS image, when xfsprogs is installed. Without
// it, the reader must say so (ErrNoXFSDB) rather than guess.
func TestXFSDBReadsARealFilesystem(t *testing.T) {
	mkfs, errMkfs := exec.LookPath("mkfs.xfs")
	_, errDB := exec.LookPath("xfs_db")
	if errMkfs != nil || errDB != nil {
		_, err := XFSDB{HostRoot: t.TempDir()}.FreeSpaceSummary(context.Background(), "/dev/nvme9n1")
		if errDB != nil && !errors.Is(err, ErrNoXFSDB) || err == nil {
			t.Fatalf("without xfsprogs: %v, want ErrNoXFSDB", err)
		}
		t.Logf("xfsprogs not installed here; the reader answered: %v", err)
		return
	}
	// The image lies where a device node would be under a host root that
	// has no xfs_db of its own: the agent's xfs_db reads it there.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(root, "dev", "xfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 320<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	out, err := XFSDB{HostRoot: root}.FreeSpaceSummary(context.Background(), "/dev/xfs.img")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := parseFreeSpace(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if fs.Extents == 0 || fs.Blocks == 0 || fs.Average < 16 {
		t.Fatalf("a fresh filesystem: %+v\n%s", fs, out)
	}
	if got := evalXFS([]xfsSummary{{Dev: xfsDevice{Device: "loop0", Points: []string{"/mnt"}}, Free: fs}}, 16, t0); len(got) != 0 {
		t.Fatalf("a fresh filesystem reported: %v", got)
	}
}
