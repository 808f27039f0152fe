package workloop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// The loop is tested against a real API server, over ConfigMaps (any kind
// the informer can list and watch serves): what its two users rely on is
// the informer's and the queue's behaviour, not a fake's.

// syncs records each Sync: the key and whether Store held its object.
type syncs struct {
	mu    sync.Mutex
	seen  []string
	ready bool
	early bool // a Sync ran before Ready
	calls chan string
}

func newSyncs() *syncs { return &syncs{calls: make(chan string, 100)} }

func (s *syncs) record(key string, present bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		s.early = true
	}
	state := key + " present"
	if !present {
		state = key + " absent"
	}
	s.seen = append(s.seen, state)
	s.calls <- state
}

// next waits for the next Sync: an informer delivers asynchronously, and
// the bound only turns a hang into a failure.
func (s *syncs) next(t *testing.T) string {
	t.Helper()
	select {
	case c := <-s.calls:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no sync within 30 s")
		return ""
	}
}

// client is the API server every test of this package shares (TestMain);
// each test works in a namespace of its own.
var client kubernetes.Interface

func TestMain(m *testing.M) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client = env.Client
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func startEnv(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "workloop-"}}
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return client, ns.Name
}

func configMaps(c kubernetes.Interface, ns string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
}

func create(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// run starts a loop on cfg and returns a stop that waits for Run to return.
func run(t *testing.T, l *Loop) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30 s of its context ending")
		}
	}
}

// loop builds a Loop over the ConfigMaps of ns whose Sync records each key
// in s (and whether Store held its object) and then returns result(key);
// cfg brings the rest (Deletes).
func (s *syncs) loop(t *testing.T, c kubernetes.Interface, ns string, cfg Config, result func(key string) error) *Loop {
	var l *Loop
	cfg.Name, cfg.ListWatch, cfg.Object = "ConfigMap", configMaps(c, ns), &corev1.ConfigMap{}
	cfg.RetryInitial, cfg.RetryMax, cfg.Log = time.Millisecond, 10*time.Millisecond, testr.New(t)
	cfg.Ready = func() { s.mu.Lock(); s.ready = true; s.mu.Unlock() }
	cfg.Sync = func(_ context.Context, key string) error {
		_, present, err := l.Store().GetByKey(key)
		if err != nil {
			return err
		}
		s.record(key, present)
		return result(key)
	}
	l = New(cfg)
	return l
}

// An object there before the loop starts is synced after Ready, one added
// later is synced, a failed sync is retried until it succeeds, and without
// Deletes a deletion syncs nothing.
func TestLoopSyncsRetriesAndIgnoresDeletes(t *testing.T) {
	c, ns := startEnv(t)
	create(t, c, ns, "before")
	s := newSyncs()
	failures := map[string]int{ns + "/flaky": 2}
	l := s.loop(t, c, ns, Config{}, func(key string) error {
		if failures[key] > 0 {
			failures[key]-- // one worker: no other Sync runs beside this one
			return errors.New("not yet")
		}
		return nil
	})
	stop := run(t, l)
	defer stop()

	if got, want := s.next(t), ns+"/before present"; got != want {
		t.Fatalf("first sync %q, want %q", got, want)
	}
	create(t, c, ns, "flaky")
	for i := 0; i < 3; i++ { // two failures, then the success
		if got, want := s.next(t), ns+"/flaky present"; got != want {
			t.Fatalf("sync %d of flaky: %q, want %q", i+1, got, want)
		}
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(context.Background(), "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A later object's sync proves the deletion's event was handled (the
	// informer delivers in order) without a sync of its own.
	create(t, c, ns, "after")
	if got, want := s.next(t), ns+"/after present"; got != want {
		t.Fatalf("after the deletion: %q, want %q (a deletion must not sync without Deletes)", got, want)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.early {
		t.Error("a sync ran before Ready")
	}
}

// With Deletes, a deleted object's key is synced with the object gone from
// Store, so that its worker can stop what it started for it.
func TestLoopSyncsADeletionWhenAsked(t *testing.T) {
	c, ns := startEnv(t)
	create(t, c, ns, "doomed")
	s := newSyncs()
	l := s.loop(t, c, ns, Config{Deletes: true}, func(string) error { return nil })
	stop := run(t, l)
	defer stop()
	if got, want := s.next(t), ns+"/doomed present"; got != want {
		t.Fatalf("first sync %q, want %q", got, want)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := s.next(t), ns+"/doomed absent"; got != want {
		t.Fatalf("after the deletion: %q, want %q", got, want)
	}
}

// Run returns once its context ends, waiting for the Sync in flight, which
// sees the context ended.
func TestLoopStopsAfterTheSyncInFlight(t *testing.T) {
	c, ns := startEnv(t)
	create(t, c, ns, "slow")
	entered, finished := make(chan struct{}), make(chan struct{})
	l := New(Config{
		Name: "ConfigMap", ListWatch: configMaps(c, ns), Object: &corev1.ConfigMap{},
		RetryInitial: time.Millisecond, RetryMax: 10 * time.Millisecond, Log: testr.New(t),
		Sync: func(ctx context.Context, _ string) error {
			close(entered)
			<-ctx.Done()
			close(finished)
			return ctx.Err()
		},
	})
	stop := run(t, l)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no sync within 30 s")
	}
	stop()
	select {
	case <-finished:
	default:
		t.Error("Run returned before the sync in flight had finished")
	}
}
