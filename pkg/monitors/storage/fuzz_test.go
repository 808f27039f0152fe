package storage

import (
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/mountinfo"
)

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(realMountinfo))
	f.Add([]byte("1 0 0:1 / / rw - rootfs rootfs rw\n"))
	f.Add([]byte("52 22 0:45 / /mnt/my\\040data rw shared:30 master:2 - nfs4 srv:/ rw\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := mountinfo.Parse(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if !strings.HasPrefix(m.Point, "/") || m.Major < 0 || m.Minor < 0 || len(m.MountOptions) == 0 || len(m.SuperOptions) == 0 {
				t.Fatalf("bad entry %+v", m)
			}
		}
		for _, p := range []string{"/", "/var/lib/kubelet", "/a b"} {
			if i := coveringMount(ms, p); i >= len(ms) || (i >= 0 && !under(p, ms[i].Point)) {
				t.Fatalf("coveringMount(%s) = %d", p, i)
			}
		}
	})
}

func FuzzParsePSI(f *testing.F) {
	f.Add([]byte("some avg10=0.15 avg60=0.18 avg300=0.58 total=23346399\nfull avg10=0.00 avg60=0.07 avg300=0.21 total=8373681\n"))
	f.Add([]byte("some avg10=100.00 avg60=0 avg300=1e2 total=0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePSI(data)
		if err != nil {
			return
		}
		for _, v := range []float64{p.Some.Avg10, p.Some.Avg60, p.Some.Avg300, p.Full.Avg10, p.Full.Avg60, p.Full.Avg300} {
			if v < 0 || v > 100 || v != v {
				t.Fatalf("%+v", p)
			}
		}
		_ = evalIOPressure(p, 20, t0)
	})
}

func FuzzParseEBSLogPage(f *testing.F) {
	f.Add(ebsPage(1, 2, 3, 4))
	f.Add(ebsPage(0, 0, 0, 0)[:96])
	f.Add([]byte{0x10, 0xb5, 0x23, 0x3c})
	f.Fuzz(func(t *testing.T, page []byte) {
		st, err := parseEBSLogPage(page)
		if err != nil {
			return
		}
		if len(page) < ebsFieldsLen {
			t.Fatalf("parsed a %d-byte page: %+v", len(page), st)
		}
		_, _ = evalEBS(map[string]ebsStats{"nvme0": {}}, map[string]ebsStats{"nvme0": st}, nil, nil, t0)
	})
}
