package collectors

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	cases := []struct {
		in   string
		want proc
		ok   bool
	}{
		{"1034 (kubelet) S 1 1034 1034 0 -1 4194560 1523 0 12 0 41 17 0 0 20 0 23 0 1042 23138304 1480 18446744073709551615 1 1",
			proc{pid: 1034, ppid: 1, comm: "kubelet", state: "S", threads: 23, rssPages: 1480}, true},
		// comm with spaces and parentheses ends at the last ')'.
		{"1301 ((sd-pam) x) S 1300 1301 1301 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1042 0 7 0",
			proc{pid: 1301, ppid: 1300, comm: "(sd-pam) x", state: "S", threads: 1, rssPages: 7}, true},
		{"garbage", proc{}, false},
		{"12 (short) S 1", proc{}, false},
	}
	for _, tc := range cases {
		got, ok := parseProcStat(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFormatProcesses(t *testing.T) {
	got := string(formatProcesses([]proc{{pid: 20, ppid: 1, comm: "kworker/0:1", state: "I"}, {pid: 3, ppid: 1, comm: "kubelet", state: "S", threads: 2, rssPages: 10, cmdline: "/usr/bin/kubelet --v=2"}}))
	want := "PID  PPID  S  THREADS  RSS_KIB  COMM         COMMAND\n" +
		"3    1     S  2        40       kubelet      /usr/bin/kubelet --v=2\n" +
		"20   1     I  0        0        kworker/0:1  [kworker/0:1]\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCgroupParsing(t *testing.T) {
	p, th, us := parseCPUStat("usage_usec 1\nnr_periods 600\nnr_throttled 300\nthrottled_usec 9500000\n")
	if p != 600 || th != 300 || us != 9500000 {
		t.Errorf("v2 cpu.stat: %d %d %d", p, th, us)
	}
	p, th, us = parseCPUStat("nr_periods 10\nnr_throttled 2\nthrottled_time 3000000\n") // v1: ns
	if p != 10 || th != 2 || us != 3000 {
		t.Errorf("v1 cpu.stat: %d %d %d", p, th, us)
	}
	if oom, high := parseMemoryEvents("low 0\nhigh 4\nmax 12\noom 2\noom_kill 2\n"); oom != 2 || high != 4 {
		t.Errorf("memory.events: %d %d", oom, high)
	}
	out := string(formatThrottling([]throttle{
		{cgroup: "/a", periods: 100, throttled: 1, throttledUsec: 10},
		{cgroup: "/quiet", periods: 100},
		{cgroup: "/b", periods: 100, throttled: 50, throttledUsec: 2000000},
		{cgroup: "/oom", oomKills: 1},
	}, 2))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "/b ") || !strings.HasPrefix(lines[2], "/a ") || !strings.Contains(lines[1], "50.0%") {
		t.Errorf("throttling table (worst first, top 2, quiet left out):\n%s", out)
	}
}

func TestMounts(t *testing.T) {
	ms := parseMountinfo(strings.Join([]string{
		"22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw",
		"23 22 0:21 / /proc rw - proc proc rw",
		"36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
		"40 22 0:50 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount rw - ext4 /dev/nvme2n1 rw",
		"41 22 0:51 / /mnt/nfs rw - nfs4 srv:/export rw",
		"42 22 0:52 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/x/rootfs rw - overlay overlay rw",
		"43 22 0:53 / /tmp rw - tmpfs tmpfs rw",
		"not a mountinfo line",
	}, "\n"))
	if len(ms) != 7 || ms[2].point != "/mnt/a b" || ms[2].fstype != "ext3" || ms[2].source != "/dev/root" {
		t.Fatalf("parsed %+v", ms)
	}
	var points []string
	for _, m := range diskFilesystems(ms) {
		points = append(points, m.point)
	}
	if want := []string{"/", "/mnt/a b", "/tmp"}; !reflect.DeepEqual(points, want) {
		t.Errorf("disk filesystems %v, want %v", points, want)
	}
}

func TestFormatKmsg(t *testing.T) {
	boot := time.Date(2024, 6, 10, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		boot time.Time
		want string
	}{
		{"3,1200,350123456,-;NVRM: Xid 79\n", boot, "2024-06-10T00:05:50.123456Z [  350.123456] err: NVRM: Xid 79\n"},
		{"6,1,5,-;hello", time.Time{}, "[    0.000005] info: hello\n"},
		{"4,2,1000000,-;nvme timeout\n SUBSYSTEM=nvme\n DEVICE=c259:0\n", time.Time{}, "[    1.000000] warn: nvme timeout\n    DEVICE=c259:0\n    SUBSYSTEM=nvme\n"},
		{"not a record\n", boot, "not a record\n"},
	}
	for _, tc := range cases {
		if got := string(formatKmsg([]byte(tc.in), tc.boot)); got != tc.want {
			t.Errorf("formatKmsg(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := parseBtime("cpu 1 2\nbtime 1718000000\n"); !got.Equal(time.Unix(1718000000, 0)) {
		t.Errorf("btime %v", got)
	}
	if !parseBtime("cpu 1").IsZero() {
		t.Error("btime without a btime line")
	}
}

func TestSmallParsers(t *testing.T) {
	if got := osPrettyName("NAME=\"Amazon Linux\"\nPRETTY_NAME=\"Amazon Linux 2023\"\n"); got != "Amazon Linux 2023" {
		t.Errorf("osPrettyName = %q", got)
	}
	if got := osPrettyName("NAME=Bottlerocket\n"); got != "Bottlerocket" {
		t.Errorf("osPrettyName without PRETTY_NAME = %q", got)
	}
	if d, ok := parseUptime("350735.47 2765328.42"); !ok || d != 350735*time.Second {
		t.Errorf("parseUptime = %v %v", d, ok)
	}
	if _, ok := parseUptime("x"); ok {
		t.Error("parseUptime accepted garbage")
	}
	if got := conntrackSummary("131072", "262144"); got != "count 131072\nmax 262144\nused 50.0%\n" {
		t.Errorf("conntrackSummary = %q", got)
	}
	if got := neighState(0x02 | 0x80); got != "REACHABLE,PERMANENT" {
		t.Errorf("neighState = %q", got)
	}
}

func TestFormatCmdline(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/kubelet\x00--v=2\x00":                          "/usr/bin/kubelet --v=2",
		"/usr/bin/tool\x00--password\x00correct horse\x00-v\x00": `/usr/bin/tool --password "correct horse" -v`,
		"sh\x00-c\x00export TOKEN=\"a b\"; run\x00":              `sh -c "export TOKEN=\"a b\"; run"`,
		"app\x00\x00--x\x00":                                     `app "" --x`,
		"app\x00line1\nline2\x00":                                `app "line1\nline2"`,
		"":                                                       "",
	} {
		if got := formatCmdline([]byte(in)); got != want {
			t.Errorf("formatCmdline(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatEnviron(t *testing.T) {
	in := "PATH=/usr/bin\x00TLS_KEY=-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n\x00A=1\r2\x00"
	want := "PATH=/usr/bin\nTLS_KEY=-----BEGIN EC PRIVATE KEY-----\\nMHcC\\n-----END EC PRIVATE KEY-----\\n\nA=1\\r2\n"
	if got := string(formatEnviron([]byte(in))); got != want {
		t.Errorf("formatEnviron = %q, want %q", got, want)
	}
}

func TestBeforeLine(t *testing.T) {
	text := []byte("a\nb\nc\nb\n")
	if got := string(beforeLine(text, []byte("b"))); got != "a\n" {
		t.Errorf("beforeLine = %q", got)
	}
	if got := string(beforeLine(text, []byte("x"))); got != string(text) {
		t.Errorf("beforeLine without the line = %q", got)
	}
	if tm, ok := journalTime([]byte("2024-06-12T10:00:01.123456+0000 host kubelet[1]: x")); !ok || tm.Unix() != 1718186401 {
		t.Errorf("journalTime = %v, %v", tm, ok)
	}
	if _, ok := journalTime([]byte("-- No entries --")); ok {
		t.Error("journalTime of a non-entry")
	}
}
