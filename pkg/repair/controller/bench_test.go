package controller_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Fleet size and shape of BenchmarkFleetRepair.
const (
	benchNodes     = 5000
	benchPools     = 10 // by the configured pool label: 500 nodes each
	benchZones     = 5
	benchUnhealthy = benchNodes / 5 // 20%: exactly the limit of every pool and zone
	benchSpread    = 60 * time.Second
	benchLead      = 30 * time.Second // from the faults' write to the first expiry
	benchPoolLabel = "bench.nodemend.dev/pool"
)

// BenchmarkFleetRepair: 5,000 nodes in the real API server, 20% of them
// (1,000, evenly over pools and zones, so the gates allow them all) turning
// Ready=Unknown with tolerations that expire spread over a minute, each with
// a pod to evict. The controller runs in this process with the real clock,
// leader election on, and the binary's default client rate limit (none)
// and concurrency (controller.DefaultMaxConcurrentReconciles).
//
// Reported: time from toleration expiry to the taint being written (the
// response to the patch), p50/p99/max; the process's peak RSS (the
// controller, plus this benchmark's small driver: it holds no node list);
// API requests by the controller per repair, from the first fault to the
// last node gone (everything: watches, lease renewals, events, patches,
// evictions, deletes).
//
// Run: go test -run '^$' -bench FleetRepair -benchtime 1x ./pkg/repair/controller/
func BenchmarkFleetRepair(b *testing.B) {
	for range b.N {
		fleetRepair(b)
	}
}

func fleetRepair(b *testing.B) {
	ctx := context.Background()
	ns := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if err := repairtest.Namespace(ctx, k8s, ns); err != nil {
		b.Fatal(err)
	}
	b.Logf("creating %d nodes", benchNodes)
	created := time.Now()
	parallel(b, benchNodes, func(i int) error {
		_, err := repairtest.Node(ctx, k8s, benchNode(i), time.Now(),
			repairtest.Labels(benchPoolLabel, fmt.Sprintf("p%d", i%benchPools), pool.ZoneLabel, fmt.Sprintf("z%d", (i/benchPools)%benchZones)))
		return err
	})
	sick := make([]int, 0, benchUnhealthy)
	for i := range benchNodes {
		if (i/benchPools/benchZones)%5 == 0 { // 1 in 5 of every pool and zone
			sick = append(sick, i)
		}
	}
	parallel(b, len(sick), func(j int) error {
		_, err := repairtest.Pod(ctx, k8s, ns, "web-"+benchNode(sick[j]), benchNode(sick[j]), repairtest.OwnedBy("apps/v1", "ReplicaSet", "web"))
		return err
	})
	b.Logf("created %d nodes and %d pods in %s", benchNodes, len(sick), time.Since(created).Round(time.Second))
	runtime.GC()
	rssBefore := rssKiB("VmRSS")

	// The controller, with every request it makes counted and its taint
	// patches timed.
	tape := &tapeRecorder{tainted: map[string]time.Time{}}
	cfg := rest.CopyConfig(restCfg)
	cfg.QPS = -1 // the binary's default: no client-side limit
	cfg.WrapTransport = tape.wrap
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{
		Logger: logr.Discard(), Namespace: ns, PauseConfigMap: "nodemend-pause", MetricsAddr: "0", HealthAddr: "0",
		LeaderElection: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := controller.Setup(ctx, mgr, controller.Options{
		Clock: clock.RealClock{}, Namespace: ns, PauseConfigMap: "nodemend-pause", PoolLabel: benchPoolLabel,
		Registerer: prometheus.NewRegistry(), SkipNameValidation: true,
	}); err != nil {
		b.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	defer func() { stop(); <-done }()
	peak := &peakRSS{}
	go peak.sample(mctx)
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		b.Fatal("cache did not sync")
	}
	time.Sleep(5 * time.Second) // the initial reconcile of every node

	// The faults: toleration expiries spread over benchSpread, starting
	// benchLead from now. LastTransitionTime has second precision, so the
	// expiries are whole seconds.
	b.ResetTimer()
	startReqs := tape.requests.Load()
	faultsAt := time.Now().Truncate(time.Second)
	expiry := map[string]time.Time{}
	for j, i := range sick {
		expiry[benchNode(i)] = faultsAt.Add(benchLead + time.Duration(j)*benchSpread/time.Duration(len(sick))).Truncate(time.Second)
	}
	parallel(b, len(sick), func(j int) error {
		name := benchNode(sick[j])
		ltt := expiry[name].Add(-30 * time.Minute)
		return repairtest.SetCondition(ctx, k8s, name, repairtest.Condition(corev1.NodeReady, corev1.ConditionUnknown, "NodeStatusUnknown", ltt))
	})
	b.Logf("faults written in %s", time.Since(faultsAt).Round(time.Millisecond))

	// Wait until every sick node is gone.
	deadline := time.Now().Add(benchLead + benchSpread + 3*time.Minute)
	for {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := k8s.List(ctx, nodes); err != nil {
			b.Fatal(err)
		}
		left := len(nodes.Items) - (benchNodes - len(sick))
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d sick nodes left", left)
		}
		time.Sleep(time.Second)
	}
	b.StopTimer()
	requests := tape.requests.Load() - startReqs

	var lat []time.Duration
	tape.mu.Lock()
	for name, at := range tape.tainted {
		lat = append(lat, at.Sub(expiry[name]))
	}
	byKind := tape.byKindSnapshot()
	tape.mu.Unlock()
	if len(lat) != len(sick) {
		b.Fatalf("%d taints for %d sick nodes", len(lat), len(sick))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(peak.max.Load())/1024, "peak-rss-MiB")
	b.ReportMetric(float64(requests)/float64(len(sick)), "requests/repair")
	b.Logf("expiry→taint: min %s p50 %s p90 %s p99 %s max %s", lat[0], pct(0.5), pct(0.9), pct(0.99), lat[len(lat)-1])
	b.Logf("RSS: %d MiB before the controller started, peak %d MiB, VmHWM %d MiB; Go heap in use %d MiB",
		rssBefore/1024, peak.max.Load()/1024, rssKiB("VmHWM")/1024, ms.HeapInuse>>20)
	b.Logf("controller API requests: %d for %d repairs (%.1f per repair): %v", requests, len(sick), float64(requests)/float64(len(sick)), byKind)

	// Leave the API server clean for whatever runs next.
	stop()
	<-done
	_ = k8s.DeleteAllOf(ctx, &corev1.Node{})
}

func benchNode(i int) string { return fmt.Sprintf("fleet-%05d", i) }

// parallel runs f(0..n-1) on 16 goroutines.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// tapeRecorder counts the controller's requests and times its taints.
type tapeRecorder struct {
	requests atomic.Int64
	mu       sync.Mutex
	tainted  map[string]time.Time
	byKind   map[string]int
}

func (t *tapeRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		isStart := false
		if req.Method == http.MethodPatch && strings.HasPrefix(req.URL.Path, "/api/v1/nodes/") && req.GetBody != nil {
			if body, err := req.GetBody(); err == nil {
				buf := make([]byte, 4096)
				n, _ := body.Read(buf)
				// The start is the one write of a record in phase
				// Draining (a JSON string inside the patch).
				isStart = strings.Contains(string(buf[:n]), `\"phase\":\"Draining\"`)
			}
		}
		resp, err := rt.RoundTrip(req)
		t.requests.Add(1)
		t.mu.Lock()
		if t.byKind == nil {
			t.byKind = map[string]int{}
		}
		t.byKind[req.Method+" "+resourceOf(req.URL.Path)]++
		if isStart && err == nil && resp.StatusCode == http.StatusOK {
			name := strings.TrimPrefix(req.URL.Path, "/api/v1/nodes/")
			if _, ok := t.tainted[name]; !ok {
				t.tainted[name] = time.Now()
			}
		}
		t.mu.Unlock()
		return resp, err
	})
}

func (t *tapeRecorder) byKindSnapshot() map[string]int {
	out := map[string]int{}
	for k, v := range t.byKind {
		out[k] = v
	}
	return out
}

// resourceOf reduces a request path to its resource (and subresource).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 2 {
		parts = parts[3:]
	} else if len(parts) > 1 {
		parts = parts[2:]
	}
	if len(parts) > 1 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "?"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// peakRSS samples the process's resident set.
type peakRSS struct{ max atomic.Int64 }

func (p *peakRSS) sample(ctx context.Context) {
	for ctx.Err() == nil {
		if v := rssKiB("VmRSS"); v > p.max.Load() {
			p.max.Store(v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rssKiB reads a field of /proc/self/status, in KiB.
func rssKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}

var _ client.Object = &corev1.Node{}
