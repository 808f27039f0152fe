package cloudmeta_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/testsupport/imdsmock"
)

func startMock(t *testing.T, args ...string) *imdsmock.Mock {
	t.Helper()
	m, err := imdsmock.Start(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func aws(t *testing.T, endpoint string) cloudmeta.Provider {
	t.Helper()
	p, err := cloudmeta.New(cloudmeta.AWS, endpoint, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDocumentsFromTheMetadataMock reads AWS's metadata mock with IMDSv2
// required: identity, placement and the network interfaces come back, and
// nothing outside the allowlist (credentials, user data) is asked for.
func TestDocumentsFromTheMetadataMock(t *testing.T) {
	m := startMock(t)
	docs, err := aws(t, m.Endpoint).Documents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range docs {
		got[d.Path] = string(d.Data)
	}
	for path, want := range map[string]string{
		"meta-data/instance-id":                                            "i-1234567890abcdef0",
		"meta-data/instance-type":                                          "m4.xlarge",
		"meta-data/ami-id":                                                 "ami-0a887e401f7654935",
		"meta-data/placement/availability-zone":                            "us-east-1a",
		"meta-data/placement/region":                                       "us-east-1",
		"dynamic/instance-identity/document":                               `"instanceType": "m4.xlarge"`,
		"meta-data/network/interfaces/macs/0e:49:61:0f:c3:11/interface-id": "eni-",
		"meta-data/network/interfaces/macs/0e:49:61:0f:c3:11/subnet-id":    "subnet-",
		"meta-data/events/maintenance/scheduled":                           "system-reboot",
	} {
		if !strings.Contains(got[path], want) {
			t.Errorf("%s = %q, want it to contain %q", path, got[path], want)
		}
	}
	for path, data := range got {
		if strings.Contains(path, "iam") || strings.Contains(path, "user-data") || strings.Contains(path, "public-keys") ||
			strings.Contains(data, "SecretAccessKey") {
			t.Errorf("document %s should never be read", path)
		}
	}
	if strings.Contains(m.Output(), "security-credentials") {
		t.Errorf("the mock was asked for credentials:\n%s", m.Output())
	}
}

// TestScheduledEventsFromTheMetadataMock: the mock's scheduled events and
// spot interruption notices are read as events; a completed event is not;
// before the mock's trigger time there are none.
func TestScheduledEventsFromTheMetadataMock(t *testing.T) {
	ctx := context.Background()
	t.Run("retirement", func(t *testing.T) {
		m := startMock(t, "events", "--code", "instance-retirement", "--state", "active",
			"--not-before", "2026-12-06T09:00:00Z", "--not-after", "2026-12-06T11:00:00Z")
		evs, err := aws(t, m.Endpoint).Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Kind != cloudmeta.Maintenance || evs[0].Code != "instance-retirement" ||
			!evs[0].NotBefore.Equal(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)) || evs[0].ID == "" {
			t.Fatalf("events = %+v", evs)
		}
	})
	t.Run("completed", func(t *testing.T) {
		m := startMock(t, "events", "--code", "system-reboot", "--state", "completed")
		evs, err := aws(t, m.Endpoint).Events(ctx)
		if err != nil || len(evs) != 0 {
			t.Fatalf("events = %+v, %v; want none", evs, err)
		}
	})
	t.Run("spot", func(t *testing.T) {
		m := startMock(t, "spot", "--action", "stop", "--time", "2026-12-05T13:02:00Z")
		evs, err := aws(t, m.Endpoint).Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Kind != cloudmeta.Interruption || evs[0].Code != "stop" ||
			!evs[0].NotBefore.Equal(time.Date(2026, 12, 5, 13, 2, 0, 0, time.UTC)) {
			t.Fatalf("events = %+v", evs)
		}
	})
	t.Run("not yet", func(t *testing.T) {
		m := startMock(t, "--mock-delay-sec", "3600")
		evs, err := aws(t, m.Endpoint).Events(ctx)
		if err != nil || len(evs) != 0 {
			t.Fatalf("events = %+v, %v; want none before the mock's trigger time", evs, err)
		}
	})
}

// TestIMDSv2TokenFlow: the token is asked for with PUT and its TTL header,
// sent on every GET, kept across requests, and asked for again after a 401.
func TestIMDSv2TokenFlow(t *testing.T) {
	var puts, unauthorized atomic.Int32
	var token atomic.Value
	token.Store("t1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/latest/api/token" {
			if r.Method != http.MethodPut || r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
				http.Error(w, "bad", http.StatusBadRequest)
				return
			}
			puts.Add(1)
			w.Write([]byte(token.Load().(string)))
			return
		}
		if r.Header.Get("X-aws-ec2-metadata-token") != token.Load().(string) {
			unauthorized.Add(1)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/latest/meta-data/events/maintenance/scheduled":
			w.Write([]byte("[]"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	p := aws(t, srv.URL)
	for i := 0; i < 3; i++ {
		if _, err := p.Events(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if puts.Load() != 1 {
		t.Errorf("%d token requests for 3 reads; want 1 (the token is kept)", puts.Load())
	}
	token.Store("t2") // the service restarted
	if _, err := p.Events(context.Background()); err != nil {
		t.Fatal(err)
	}
	if puts.Load() != 2 || unauthorized.Load() != 1 {
		t.Errorf("after a 401: %d token requests, %d refusals; want 2 and 1", puts.Load(), unauthorized.Load())
	}
}

// TestNoCloudAnswers: an endpoint where nothing listens is "not on a cloud
// that answers", quickly; so is a providerID of no known cloud, without any
// request.
func TestNoCloudAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = aws(t, "http://"+addr).Events(context.Background())
	if !errors.Is(err, cloudmeta.ErrNoCloud) {
		t.Fatalf("err = %v; want ErrNoCloud", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}

	asked := false
	p, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: "http://" + addr},
		func(context.Context) (string, error) { asked = true; return "kind://kwok/node-1", nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Documents(context.Background()); !errors.Is(err, cloudmeta.ErrNoCloud) || !asked {
		t.Fatalf("err = %v (providerID read: %v); want ErrNoCloud", err, asked)
	}
}

// TestSelectFollowsProviderID: auto picks AWS for aws:// and asks the
// configured endpoint.
func TestSelectFollowsProviderID(t *testing.T) {
	m := startMock(t)
	p, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: m.Endpoint},
		func(context.Context) (string, error) { return "aws:///us-east-1a/i-1234567890abcdef0", nil })
	if err != nil {
		t.Fatal(err)
	}
	docs, err := p.Documents(context.Background())
	if err != nil || len(docs) == 0 || p.Cloud() != cloudmeta.AWS {
		t.Fatalf("docs %d, cloud %q, err %v", len(docs), p.Cloud(), err)
	}
}

// TestEndpointIsLinkLocalOrLoopback: names, other addresses, https, paths
// and credentials are refused; the clouds' own addresses and loopback are
// accepted.
func TestEndpointIsLinkLocalOrLoopback(t *testing.T) {
	for _, ok := range []string{"http://169.254.169.254", "http://[fd00:ec2::254]", "http://127.0.0.1:1338", "http://[::1]:80", "http://169.254.169.254/"} {
		if _, err := cloudmeta.CheckEndpoint(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://metadata.google.internal", "http://10.0.0.1", "https://169.254.169.254", "http://8.8.8.8",
		"http://u:p@169.254.169.254", "http://169.254.169.254/latest", "http://localhost:1338", "http://169.254.169.254?x=1"} {
		if _, err := cloudmeta.CheckEndpoint(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestParseIMDSScheduled(t *testing.T) {
	// The format of the EC2 documentation's example (instances-status-check_sched).
	data := `[{"NotBefore" : "21 Jan 2019 09:00:43 GMT","Code" : "system-reboot","Description" : "scheduled reboot","EventId" : "instance-event-0d59937288b749b32","NotAfter" : "21 Jan 2019 09:17:23 GMT","State" : "active"},
	{"NotBefore" : "1 Jan 2019 09:00:43 GMT","Code" : "instance-reboot","Description" : "[Completed] scheduled reboot","EventId" : "instance-event-1","State" : "completed"}]`
	evs, err := cloudmeta.ParseIMDSScheduled([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != "instance-event-0d59937288b749b32" || !evs[0].NotAfter.Equal(time.Date(2019, 1, 21, 9, 17, 23, 0, time.UTC)) {
		t.Fatalf("events = %+v", evs)
	}
	if evs, err := cloudmeta.ParseIMDSScheduled([]byte("[]")); err != nil || len(evs) != 0 {
		t.Fatalf("empty: %v %v", evs, err)
	}
	if _, err := cloudmeta.ParseIMDSScheduled([]byte("<html>")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func FuzzParseIMDS(f *testing.F) {
	f.Add([]byte(`[{"Code":"system-reboot","NotBefore":"21 Jan 2019 09:00:43 GMT","State":"active"}]`))
	f.Add([]byte(`{"action":"terminate","time":"2017-09-18T08:22:00Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = cloudmeta.ParseIMDSScheduled(data)
		_, _ = cloudmeta.ParseIMDSSpotAction(data)
	})
}

// gceServer answers as GCE's metadata server documents it
// (compute/docs/metadata): paths under /computeMetadata/v1/, only with
// "Metadata-Flavor: Google" (403 otherwise), the header echoed; it also
// holds what must never be read (attributes, service account tokens).
func gceServer(t *testing.T, maintenance, preempted string) (*httptest.Server, *[]string) {
	t.Helper()
	var asked []string
	values := map[string]string{
		"/computeMetadata/v1/instance/id":                             "4520031799277581759",
		"/computeMetadata/v1/instance/machine-type":                   "projects/123456789/machineTypes/n2-standard-8",
		"/computeMetadata/v1/instance/zone":                           "projects/123456789/zones/europe-west1-b",
		"/computeMetadata/v1/instance/image":                          "projects/cos-cloud/global/images/cos-113",
		"/computeMetadata/v1/instance/network-interfaces/":            `[{"ip":"10.132.0.5","mac":"42:01:0a:84:00:05","network":"projects/123456789/networks/default"}]`,
		"/computeMetadata/v1/instance/maintenance-event":              maintenance,
		"/computeMetadata/v1/instance/preempted":                      preempted,
		"/computeMetadata/v1/instance/attributes/kube-env":            "KUBELET_KEY: secret",
		"/computeMetadata/v1/instance/service-accounts/default/token": `{"access_token":"secret"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
			return
		}
		v, ok := values[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		w.Write([]byte(v))
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

// TestGCEMetadata: the GCE provider sends the flavor header, reads the
// instance's identity and network, never attributes or tokens, and turns a
// host maintenance and a preemption into events.
func TestGCEMetadata(t *testing.T) {
	srv, asked := gceServer(t, "TERMINATE_ON_HOST_MAINTENANCE", "TRUE")
	p, err := cloudmeta.New(cloudmeta.GCE, srv.URL, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := p.Documents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range docs {
		got[d.Path] = string(d.Data)
	}
	if got["instance/id"] != "4520031799277581759" || !strings.Contains(got["instance/network-interfaces"], "10.132.0.5") {
		t.Errorf("documents %v", got)
	}
	for _, a := range *asked {
		if strings.Contains(a, "attributes") || strings.Contains(a, "service-accounts") {
			t.Errorf("asked for %s", a)
		}
	}
	evs, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != cloudmeta.Maintenance || evs[0].Code != "terminate-on-host-maintenance" || evs[1].Kind != cloudmeta.Interruption {
		t.Fatalf("events %+v", evs)
	}
	srv2, _ := gceServer(t, "NONE", "FALSE")
	p2, _ := cloudmeta.New(cloudmeta.GCE, srv2.URL, 2*time.Second)
	if evs, err := p2.Events(context.Background()); err != nil || len(evs) != 0 {
		t.Fatalf("quiet VM: %+v %v", evs, err)
	}
	if cloudmeta.CloudOf("gce://my-project/europe-west1-b/node-1") != cloudmeta.GCE || cloudmeta.CloudOf("azure:///subscriptions/x") != cloudmeta.Azure || cloudmeta.CloudOf("openstack:///x") != "" {
		t.Error("CloudOf")
	}
}
