package networking

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/health"
)

// ipamdLine is one ipamd.log record as the VPC CNI writes it (zap JSON,
// ISO 8601 "ts").
func ipamdLine(ts time.Time, level, caller, msg string) string {
	b, _ := json.Marshal(map[string]string{
		"level": level, "ts": ts.UTC().Format("2006-01-02T15:04:05.000Z0700"), "caller": caller, "msg": msg,
	})
	return string(b) + "\n"
}

func unreachable(ts time.Time) string {
	return ipamdLine(ts, "error", "k8sapi/k8sutils.go:79", `Unable to reach API Server, error communicating with apiserver: Get "https://172.20.0.1:443/version?timeout=32s": dial tcp 172.20.0.1:443: i/o timeout`)
}

func connected(ts time.Time) string {
	return ipamdLine(ts, "info", "k8sapi/k8sutils.go:85", "Successful communication with the Cluster! Cluster Version is: v1.31. git version: v1.31.4-eks-2d5f260. git tree state: clean. commit: 0b97a5a. platform: linux/amd64")
}

type cniFixture struct {
	t    *testing.T
	root *hostroot.Root
	clk  *clocktesting.FakePassiveClock
	m    *Monitor
}

func newCNIFixture(t *testing.T) *cniFixture {
	root := hostroot.New(t).WithProc()
	clk := clocktesting.NewFakePassiveClock(t0)
	return &cniFixture{t: t, root: root, clk: clk, m: New(testEnv(root, clk, nil), Options{ProbeTimeout: 2 * time.Second})}
}

func (f *cniFixture) check(want string) {
	f.t.Helper()
	fs, err := runCheck(f.t, f.m, "net-cni")
	if err != nil {
		f.t.Fatal(err)
	}
	if got := reasons(fs); got != want {
		f.t.Fatalf("at %v: findings %q, want %q (%v)", f.clk.Now().Sub(t0), got, want, fs)
	}
}

func (f *cniFixture) advance(d time.Duration) { f.clk.SetTime(f.clk.Now().Add(d)) }

func TestNoCNIIsNotAFault(t *testing.T) {
	f := newCNIFixture(t)
	for range 3 {
		f.check("")
		f.advance(time.Hour)
	}
	// An unknown CNI is not ours to judge.
	f.root.AddCNIConfig("10-weave.conflist")
	f.check("")
}

func TestIPAMDNotRunning(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("10-aws.conflist")
	f.check("")
	f.advance(119 * time.Second)
	f.check("")
	f.advance(time.Second)
	f.check("IPAMDNotRunning/aws-vpc-cni")
	fs, _ := runCheck(t, f.m, "net-cni")
	if want := "aws-vpc-cni is installed (/etc/cni/net.d/10-aws.conflist) but its agent aws-k8s-agent has not been running since 2026-03-14T09:26:53Z"; !strings.Contains(fs[0].Message, want) {
		t.Fatalf("message %q", fs[0].Message)
	}

	f.root.AddProcess(hostroot.Process{PID: 2345, PPID: 2301, Comm: "aws-k8s-agent", State: 'S'})
	f.check("")
	// The PID is remembered: it is checked first, the scan only runs again
	// when the process is gone.
	if f.m.cni.reader.pids["aws-k8s-agent"] != 2345 {
		t.Fatalf("pid not remembered: %v", f.m.cni.reader.pids)
	}
	f.root.Remove("proc/2345")
	f.advance(30 * time.Second)
	f.check("")
	f.advance(2 * time.Minute)
	f.check("IPAMDNotRunning/aws-vpc-cni")
	f.root.AddProcess(hostroot.Process{PID: 2999, PPID: 2901, Comm: "aws-k8s-agent", State: 'S'})
	f.check("")
}

func TestCNIUninstalledIsForgotten(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("10-flannel.conflist")
	f.check("")
	f.advance(5 * time.Minute)
	f.check("CNIAgentNotRunning/flannel")
	f.root.Remove("etc/cni/net.d/10-flannel.conflist")
	f.check("")
	f.root.AddCNIConfig("10-flannel.conflist")
	f.check("") // starts over
}

func TestIPAMDNotReadyFromItsLog(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("10-aws.conflist")
	f.root.AddProcess(hostroot.Process{PID: 2345, PPID: 2301, Comm: "aws-k8s-agent", State: 'S'})
	log := "var/log/aws-routed-eni/ipamd.log"
	// Lines from before the agent started say nothing about now.
	f.root.WriteFile(log, unreachable(t0.Add(-time.Hour)))
	f.check("")

	appendFile(t, f.root.Path(log), unreachable(t0.Add(10*time.Second))+`{"level":"debug","ts":"2026-03-14T09:27:05.000Z","msg":"IP pool stats"}`+"\n")
	f.advance(30 * time.Second)
	f.check("") // failing for 20s
	f.advance(5 * time.Minute)
	f.check("IPAMDNotReady/aws-vpc-cni")
	fs, _ := runCheck(t, f.m, "net-cni")
	if msg := fs[0].Message; !strings.Contains(msg, "not been ready since 2026-03-14T09:27:03Z") || !strings.Contains(msg, "dial tcp 172.20.0.1:443: i/o timeout") {
		t.Fatalf("message %q", msg)
	}

	// A partial line is kept until it is complete.
	line := connected(f.clk.Now())
	appendFile(t, f.root.Path(log), line[:40])
	f.check("IPAMDNotReady/aws-vpc-cni")
	appendFile(t, f.root.Path(log), line[40:])
	f.check("")

	// Rotation by rename: the new file is read from its start.
	appendFile(t, f.root.Path(log), unreachable(f.clk.Now()))
	f.check("")
	f.advance(10 * time.Minute)
	f.check("IPAMDNotReady/aws-vpc-cni")
	if err := os.Rename(f.root.Path(log), f.root.Path(log+".1")); err != nil {
		t.Fatal(err)
	}
	f.root.WriteFile(log, connected(f.clk.Now()))
	f.check("")
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestCiliumNotReadyFromItsAPI serves cilium-agent's status on a real unix
// socket at the host path the agent uses.
func TestCiliumNotReadyFromItsAPI(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("05-cilium.conflist")
	f.root.AddProcess(hostroot.Process{PID: 3100, PPID: 3000, Comm: "cilium-agent", State: 'S'})
	var state atomic.Value
	state.Store("Ok")
	sock := f.root.Path(ciliumSocketPath)
	if len(sock) > 100 {
		t.Fatalf("socket path %s is longer than AF_UNIX allows; set TMPDIR to a shorter directory", sock)
	}
	if err := os.MkdirAll(f.root.Path("var/run/cilium"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/healthz" {
			http.NotFound(w, r)
			return
		}
		// models.StatusResponse, trimmed.
		fmt.Fprintf(w, `{"cilium":{"state":"Ok","msg":"Ok"},"kubernetes":{"state":%q,"msg":"Get \"https://172.20.0.1:443/version\": dial tcp 172.20.0.1:443: connect: connection refused","k8s-api-versions":["v1"]},"kvstore":{"state":"Ok","msg":"Disabled"}}`, state.Load())
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	f.check("")
	state.Store("Failure")
	f.check("")
	f.advance(5 * time.Minute)
	f.check("CNIAgentNotReady/cilium")
	fs, _ := runCheck(t, f.m, "net-cni")
	if !strings.Contains(fs[0].Message, "cilium-agent cannot reach the API server: Get") {
		t.Fatalf("message %q", fs[0].Message)
	}
	state.Store("Ok")
	f.check("")
	// The agent's socket gone: not running is the other reason's business.
	srv.Close()
	state.Store("Failure")
	f.advance(time.Hour)
	f.check("")
}

func TestFelixReadiness(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("10-calico.conflist")
	f.root.AddProcess(hostroot.Process{PID: 4100, PPID: 4000, Comm: "calico-node", State: 'S'})
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "+------------------+---------+----------------+-----------------+--------+")
		fmt.Fprintln(w, "| async_calc_graph | reporting non-ready | felix-startup |")
	}))
	t.Cleanup(srv.Close)
	f.m.felixAddr = strings.TrimPrefix(srv.URL, "http://")
	f.check("")
	f.advance(5 * time.Minute)
	f.check("CNIAgentNotReady/calico")
	ready.Store(true)
	f.check("")
}

func TestEvalCNIThresholdsPerReason(t *testing.T) {
	specs := cniSpecs()
	obs := []cniObservation{{Spec: specs[0], Config: "10-aws.conflist"}, {Spec: specs[3], Config: "10-flannel.conflist"}}
	thr := func(r string) time.Duration {
		if r == health.ReasonIPAMDNotRunning {
			return time.Minute
		}
		return time.Hour
	}
	st, _ := evalCNI(cniEval{}, obs, thr, t0)
	_, fs := evalCNI(st, obs, thr, t0.Add(2*time.Minute))
	if got := reasons(fs); got != "IPAMDNotRunning/aws-vpc-cni" {
		t.Fatalf("got %q", got)
	}
}

// ipamdStarted is IPAMD's first line (cmd/aws-k8s-agent/main.go).
func ipamdStarted(ts time.Time) string {
	return ipamdLine(ts, "info", "aws-k8s-agent/main.go:105", "Starting L-IPAMD v1.19.2  ...")
}

// TestIPAMDEventsFromItsLog: restarts and address exhaustion as IPAMD logs
// them, read by the CNI check from the host's ipamd.log.
func TestIPAMDEventsFromItsLog(t *testing.T) {
	f := newCNIFixture(t)
	f.root.AddCNIConfig("10-aws.conflist")
	f.root.AddProcess(hostroot.Process{PID: 2345, PPID: 2301, Comm: "aws-k8s-agent", State: 'S'})
	log := "var/log/aws-routed-eni/ipamd.log"
	f.root.WriteFile(log, ipamdStarted(t0.Add(-2*time.Hour)))
	f.check("")

	// Four starts in ten minutes: below the threshold of five an hour.
	for i := range 4 {
		appendFile(t, f.root.Path(log), ipamdStarted(t0.Add(time.Duration(i)*2*time.Minute)))
	}
	f.advance(10 * time.Minute)
	f.check("")
	appendFile(t, f.root.Path(log), ipamdStarted(f.clk.Now()))
	f.check("IPAMDRepeatedlyRestart/aws-vpc-cni")
	fs, _ := runCheck(t, f.m, "net-cni")
	if len(fs) != 1 || !strings.Contains(fs[0].Message, "started 5 times within the last hour (threshold 5)") {
		t.Fatalf("%v", fs)
	}
	// An hour after the first of them, it has calmed down.
	f.advance(55 * time.Minute)
	f.check("")

	// The subnet is full: EC2's error when IPAMD grows its pool, then the
	// datastore's for the next pod. Reported in the check that reads them.
	appendFile(t, f.root.Path(log), ipamdLine(f.clk.Now(), "error", "ipamd/ipamd.go:805",
		"Failed to increase pool size due to not able to allocate ENI AllocENI: error creating network interface: InsufficientFreeAddressesInSubnet: The specified subnet does not have enough free addresses to satisfy the request.\n\tstatus code: 400, request id: 0a1b2c3d")+
		ipamdLine(f.clk.Now(), "error", "datastore/data_store.go:858", "DataStore has no available IP/Prefix addresses"))
	f.check("IPAMDNoIPs/aws-vpc-cni")
	fs, _ = runCheck(t, f.m, "net-cni")
	if len(fs) != 0 {
		t.Fatalf("the same lines reported twice: %v", fs)
	}
	appendFile(t, f.root.Path(log), ipamdLine(f.clk.Now(), "info", "rpc/rpc.pb.go:713", "Send AddNetworkReply: IPv4Addr: , IPv6Addr: , DeviceNumber: -1, err: AssignPodIPv4Address: no available IP/Prefix addresses"))
	f.check("IPAMDNoIPs/aws-vpc-cni")

	// IPAMD gone: the message is not carried into later checks.
	appendFile(t, f.root.Path(log), ipamdLine(f.clk.Now(), "error", "datastore/data_store.go:858", "DataStore has no available IP/Prefix addresses"))
	f.root.Remove("proc/2345")
	f.check("")
}
