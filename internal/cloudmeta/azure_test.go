package cloudmeta_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/cloudmeta"
)

// azureInstanceDoc is the shape of the instance document of api-version
// 2021-02-01 in Azure's IMDS documentation (virtual-machines/
// instance-metadata-service, "Sample 1"), cut down, with the fields that
// must never reach a bundle filled in.
const azureInstanceDoc = `{
  "compute": {
    "azEnvironment": "AZUREPUBLICCLOUD",
    "location": "westus",
    "name": "examplevmname",
    "offer": "UbuntuServer",
    "osType": "Linux",
    "priority": "Regular",
    "provider": "Microsoft.Compute",
    "resourceGroupName": "macikgo-test-may-23",
    "resourceId": "/subscriptions/xxxxxxxx-xxxxx-xxx-xxx-xxxx/resourceGroups/macikgo-test-may-23/providers/Microsoft.Compute/virtualMachines/examplevmname",
    "sku": "18.04-LTS",
    "userData": "S1VCRUxFVF9LRVk9c2VjcmV0",
    "customData": "c2VjcmV0LWN1c3RvbQ==",
    "publicKeys": [{"keyData": "ssh-rsa 0", "path": "/home/user/.ssh/authorized_keys0"}],
    "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
    "vmScaleSetName": "crpteste9vflji9",
    "vmSize": "Standard_A3",
    "zone": "1"
  },
  "network": {
    "interface": [{
      "ipv4": {"ipAddress": [{"privateIpAddress": "10.144.133.132", "publicIpAddress": ""}],
               "subnet": [{"address": "10.144.133.128", "prefix": "26"}]},
      "ipv6": {"ipAddress": []},
      "macAddress": "0011AAFFBB22"
    }]
  }
}`

// azureEventsDoc is a Scheduled Events document as the documentation's
// "Query for events" shows it (api-version 2020-07-01).
func azureEventsDoc(events ...string) string {
	return `{"DocumentIncarnation": 2, "Events": [` + strings.Join(events, ",") + `]}`
}

const azureFreeze = `{"EventId": "f020ba2e-3bc0-4c40-a10b-86575a9eabd5", "EventType": "Freeze", "ResourceType": "VirtualMachine",
  "Resources": ["examplevmname"], "EventStatus": "Scheduled", "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
  "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
  "EventSource": "Platform", "DurationInSeconds": 5}`

// azureServer answers as Azure's IMDS documents it: /metadata/… only with
// "Metadata: true" and an api-version (400 otherwise, as the service does),
// compute/name as text with format=text.
func azureServer(t *testing.T, events string) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		if r.Header.Get("Metadata") != "true" {
			http.Error(w, `{"error": "Bad request. Required metadata header not specified"}`, http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("api-version") == "" {
			http.Error(w, `{"error": "Bad request. api-version was not specified in the request"}`, http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/metadata/instance":
			w.Write([]byte(azureInstanceDoc))
		case "/metadata/instance/compute/name":
			if r.URL.Query().Get("format") != "text" {
				w.Write([]byte(`"examplevmname"`))
				return
			}
			w.Write([]byte("examplevmname"))
		case "/metadata/scheduledevents":
			w.Write([]byte(events))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), asked...) }
}

func provider(t *testing.T, cloud, endpoint string) cloudmeta.Provider {
	t.Helper()
	p, err := cloudmeta.New(cloud, endpoint, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAzureScheduledEvents: the documentation's event types as the
// service sends them become events (Preempt an interruption, the others
// maintenance), an empty Events list none, and an event that names another
// VM of the availability set is not this VM's.
func TestAzureScheduledEvents(t *testing.T) {
	notBefore := time.Date(2022, 4, 11, 22, 26, 58, 0, time.UTC)
	event := func(typ, resource string) string {
		return strings.NewReplacer(`"Freeze"`, `"`+typ+`"`, `"examplevmname"`, `"`+resource+`"`).Replace(azureFreeze)
	}
	for _, tc := range []struct {
		name     string
		doc      string
		kind     cloudmeta.EventKind
		code     string
		notAfter time.Time
	}{
		{"none", azureEventsDoc(), "", "", time.Time{}},
		{"freeze", azureEventsDoc(azureFreeze), cloudmeta.Maintenance, "freeze", notBefore.Add(5 * time.Second)},
		{"reboot", azureEventsDoc(event("Reboot", "examplevmname")), cloudmeta.Maintenance, "reboot", notBefore.Add(5 * time.Second)},
		{"redeploy", azureEventsDoc(event("Redeploy", "examplevmname")), cloudmeta.Maintenance, "redeploy", notBefore.Add(5 * time.Second)},
		{"terminate", azureEventsDoc(event("Terminate", "examplevmname")), cloudmeta.Maintenance, "terminate", notBefore.Add(5 * time.Second)},
		{"preempt", azureEventsDoc(event("Preempt", "examplevmname")), cloudmeta.Interruption, "preempt", notBefore.Add(5 * time.Second)},
		{"another VM's", azureEventsDoc(event("Reboot", "othervm")), "", "", time.Time{}},
		{"started, no NotBefore", azureEventsDoc(strings.Replace(azureFreeze, `"Mon, 11 Apr 2022 22:26:58 GMT"`, `""`, 1)),
			cloudmeta.Maintenance, "freeze", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := azureServer(t, tc.doc)
			evs, err := provider(t, cloudmeta.Azure, srv.URL).Events(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.kind == "" {
				if len(evs) != 0 {
					t.Fatalf("events %+v; want none", evs)
				}
				return
			}
			if len(evs) != 1 {
				t.Fatalf("events %+v; want one", evs)
			}
			ev := evs[0]
			if ev.Kind != tc.kind || ev.Code != tc.code || ev.ID != "f020ba2e-3bc0-4c40-a10b-86575a9eabd5" || !ev.NotAfter.Equal(tc.notAfter) {
				t.Errorf("event %+v; want %s %s until %v", ev, tc.kind, tc.code, tc.notAfter)
			}
			if !tc.notAfter.IsZero() && !ev.NotBefore.Equal(notBefore) {
				t.Errorf("NotBefore %v; want %v", ev.NotBefore, notBefore)
			}
			if !strings.Contains(ev.Description, "Platform") || !strings.Contains(ev.Description, "Scheduled") {
				t.Errorf("description %q lacks the event's source and status", ev.Description)
			}
		})
	}
	if _, err := cloudmeta.ParseAzureScheduledEvents([]byte("<html>"), ""); err == nil {
		t.Error("garbage accepted")
	}
}

// TestAzureDocuments: the instance document comes back without user data,
// custom data or SSH keys, with the scheduled events beside it; every
// request carries the header and an api-version.
func TestAzureDocuments(t *testing.T) {
	srv, asked := azureServer(t, azureEventsDoc(azureFreeze))
	docs, err := provider(t, cloudmeta.Azure, srv.URL).Documents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range docs {
		got[d.Path] = string(d.Data)
	}
	inst := got["metadata/instance"]
	for _, want := range []string{`"vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6"`, `"vmSize": "Standard_A3"`, "10.144.133.132"} {
		if !strings.Contains(inst, want) {
			t.Errorf("metadata/instance lacks %s:\n%s", want, inst)
		}
	}
	for _, secret := range []string{"userData", "S1VCRUxFVF9LRVk9c2VjcmV0", "customData", "c2VjcmV0LWN1c3RvbQ==", "ssh-rsa"} {
		if strings.Contains(inst, secret) {
			t.Errorf("metadata/instance holds %s", secret)
		}
	}
	if !strings.Contains(got["metadata/scheduledevents"], "f020ba2e") {
		t.Errorf("metadata/scheduledevents = %q", got["metadata/scheduledevents"])
	}
	for _, a := range asked() {
		if !strings.Contains(a, "api-version=") || strings.Contains(a, "userData") || strings.Contains(a, "attested") || strings.Contains(a, "identity") {
			t.Errorf("asked %s", a)
		}
	}
}

// TestNotOnACloudThatAnswers: for every cloud, an address where nothing
// listens, and a web server that is no metadata service, read as "not on a
// cloud that answers".
func TestNotOnACloudThatAnswers(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, cloud := range []string{cloudmeta.AWS, cloudmeta.GCE, cloudmeta.Azure} {
		for name, endpoint := range map[string]string{"nothing listens": closed.URL, "not a metadata service": web.URL} {
			t.Run(cloud+"/"+name, func(t *testing.T) {
				p := provider(t, cloud, endpoint)
				if _, err := p.Documents(context.Background()); !errors.Is(err, cloudmeta.ErrNoCloud) {
					t.Errorf("documents: %v; want %v", err, cloudmeta.ErrNoCloud)
				}
				evs, err := p.Events(context.Background())
				if len(evs) != 0 || (err != nil && !errors.Is(err, cloudmeta.ErrNoCloud)) {
					t.Errorf("events %+v, %v; want none and no error but %v", evs, err, cloudmeta.ErrNoCloud)
				}
			})
		}
	}
}

// TestSlowEndpointTimesOut: a metadata service that never answers costs
// the request timeout, not a hang, and reads as no cloud. The handler
// blocks until the test ends; the client gives up after its timeout.
func TestSlowEndpointTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	for _, cloud := range []string{cloudmeta.AWS, cloudmeta.GCE, cloudmeta.Azure} {
		t.Run(cloud, func(t *testing.T) {
			p, err := cloudmeta.New(cloud, srv.URL, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := p.Events(context.Background()); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, cloudmeta.ErrNoCloud) {
					t.Errorf("err = %v; want %v", err, cloudmeta.ErrNoCloud)
				}
			case <-time.After(30 * time.Second):
				// A generous bound, never reached when the timeout works:
				// it only keeps a broken client from hanging the run.
				t.Fatal("the request did not time out")
			}
		})
	}
}

// TestOnlyTheProviderIDsCloudIsAsked: with auto selection, a node whose
// providerID names cloud Y sends requests of Y's metadata service only
// (its paths and headers), never X's; a providerID of a cloud without an
// implemented service sends none.
func TestOnlyTheProviderIDsCloudIsAsked(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/latest/") && r.Header.Get("Metadata") == "" && r.Header.Get("Metadata-Flavor") == "":
			seen[cloudmeta.AWS]++
		case strings.HasPrefix(r.URL.Path, "/computeMetadata/") && r.Header.Get("Metadata-Flavor") == "Google" && r.Header.Get("Metadata") == "":
			seen[cloudmeta.GCE]++
		case strings.HasPrefix(r.URL.Path, "/metadata/") && r.Header.Get("Metadata") == "true" && r.Header.Get("Metadata-Flavor") == "":
			seen[cloudmeta.Azure]++
		default:
			seen["unknown "+r.URL.Path]++
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, tc := range []struct{ providerID, cloud string }{
		{"aws:///us-east-1a/i-1234567890abcdef0", cloudmeta.AWS},
		{"gce://my-project/europe-west1-b/node-1", cloudmeta.GCE},
		{"azure:///subscriptions/xxxxxxxx/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/examplevmname", cloudmeta.Azure},
		{"azure:///subscriptions/xxxxxxxx/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-vmss/virtualMachines/0", cloudmeta.Azure},
		{"openstack:///4f7f6c7e-3b1f-4d5e-9c0a-0d6f1d0c4c11", ""},
		{"kind://docker/kind/kind-worker", ""},
	} {
		t.Run(tc.providerID, func(t *testing.T) {
			mu.Lock()
			clear(seen)
			mu.Unlock()
			p, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: srv.URL, Timeout: 2 * time.Second},
				func(context.Context) (string, error) { return tc.providerID, nil })
			if err != nil {
				t.Fatal(err)
			}
			_, _ = p.Documents(context.Background())
			_, _ = p.Events(context.Background())
			if p.Cloud() != tc.cloud {
				t.Errorf("cloud %q; want %q", p.Cloud(), tc.cloud)
			}
			mu.Lock()
			defer mu.Unlock()
			for shape, n := range seen {
				if shape != tc.cloud {
					t.Errorf("%d requests shaped as %q on a node whose providerID names %q", n, shape, tc.cloud)
				}
			}
			if tc.cloud != "" && seen[tc.cloud] == 0 {
				t.Errorf("no request to %s's metadata service", tc.cloud)
			}
		})
	}
}
