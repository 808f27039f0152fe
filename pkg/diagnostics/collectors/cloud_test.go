package collectors_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
)

// azureIMDS answers as Azure's IMDS documents it (virtual-machines/
// instance-metadata-service, api-version 2021-02-01; Scheduled Events,
// 2020-07-01), only with "Metadata: true"; tags carries a planted secret
// and userData what must never be read into a bundle.
func azureIMDS(t *testing.T, secret string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/metadata/") {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Metadata") == "true" {
			asked.Add(1)
		}
		if r.Header.Get("Metadata") != "true" || r.URL.Query().Get("api-version") == "" {
			http.Error(w, `{"error": "Bad request"}`, http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/metadata/instance":
			w.Write([]byte(`{"compute": {"location": "westeurope", "name": "aks-nodepool1-12345678-vmss000000",
			  "priority": "Spot", "resourceId": "/subscriptions/xxxxxxxx/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/0",
			  "tags": "aks-managed-token:` + secret + `", "userData": "a3ViZWxldC1ib290c3RyYXAtdG9rZW4=",
			  "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6", "vmScaleSetName": "aks-nodepool1-12345678-vmss",
			  "vmSize": "Standard_D4s_v3", "zone": "2"},
			  "network": {"interface": [{"ipv4": {"ipAddress": [{"privateIpAddress": "10.224.0.4", "publicIpAddress": ""}],
			  "subnet": [{"address": "10.224.0.0", "prefix": "16"}]}, "ipv6": {"ipAddress": []}, "macAddress": "000D3A2B4C5D"}]}}`))
		case "/metadata/instance/compute/name":
			w.Write([]byte("aks-nodepool1-12345678-vmss000000"))
		case "/metadata/scheduledevents":
			w.Write([]byte(`{"DocumentIncarnation": 1, "Events": [{"EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
			  "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["aks-nodepool1-12345678-vmss000000"],
			  "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "",
			  "EventSource": "Platform", "DurationInSeconds": -1}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

// TestAzureBundle: on an Azure node the bundle holds the instance document
// and the scheduled events under base/cloud/azure/, a summary with the VM's
// identity and its eviction, no user data, and the planted secret redacted.
func TestAzureBundle(t *testing.T) {
	h := diagtest.NewHost(t)
	secret := h.Secrets[1] // a JWT
	srv, _ := azureIMDS(t, secret)
	cloud, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: srv.URL, Timeout: 2 * time.Second},
		func(context.Context) (string, error) {
			return "azure:///subscriptions/xxxxxxxx/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/0", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	e := env(h)
	e.Cloud = cloud
	files, res := bundleOf(t, e, v1alpha1.CategoryBase)
	for _, r := range res {
		if r.Name == "base/cloud-metadata" && (r.Error != "" || r.Skipped != "") {
			t.Errorf("cloud-metadata: skipped %q, error %q", r.Skipped, r.Error)
		}
	}
	inst := files["base/cloud/azure/metadata/instance"]
	if !strings.Contains(inst, `"vmSize": "Standard_D4s_v3"`) || !strings.Contains(files["base/cloud/azure/metadata/scheduledevents"], "Preempt") {
		t.Errorf("instance %q, events %q", inst, files["base/cloud/azure/metadata/scheduledevents"])
	}
	for _, want := range []string{"cloud:             azure", "vm-size:           Standard_D4s_v3", "zone:              2",
		"priority:          Spot", "scheduled event:   preempt 602d9444-d2cd-49c7-8624-8643e7171297 from 2016-09-19T18:29:47Z"} {
		if !strings.Contains(files["base/cloud/instance.txt"], want) {
			t.Errorf("instance.txt lacks %q:\n%s", want, files["base/cloud/instance.txt"])
		}
	}
	for name, content := range files {
		if strings.Contains(content, secret) || strings.Contains(content, "a3ViZWxldC1ib290c3RyYXAtdG9rZW4=") {
			t.Errorf("%s holds a secret or the VM's user data", name)
		}
	}
}

// TestCloudMetadataFollowsProviderID: a node whose providerID names GCE or
// AWS, or no cloud, never asks the Azure service listening at the
// endpoint: the collector skips, and no file is under base/cloud/azure/.
func TestCloudMetadataFollowsProviderID(t *testing.T) {
	for name, providerID := range map[string]string{"gce": "gce://my-project/europe-west1-b/node-1",
		"aws": "aws:///us-east-1a/i-1234567890abcdef0", "kind": "kind://docker/kind/kind-worker"} {
		t.Run(name, func(t *testing.T) {
			h := diagtest.NewHost(t)
			srv, asked := azureIMDS(t, "x")
			cloud, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: srv.URL, Timeout: 2 * time.Second},
				func(context.Context) (string, error) { return providerID, nil })
			if err != nil {
				t.Fatal(err)
			}
			e := env(h)
			e.Cloud = cloud
			files, res := bundleOf(t, e, v1alpha1.CategoryBase)
			for f := range files {
				if strings.HasPrefix(f, "base/cloud/azure/") {
					t.Errorf("%s in the bundle of a node whose providerID is %s", f, providerID)
				}
			}
			for _, r := range res {
				if r.Name == "base/cloud-metadata" && !strings.Contains(r.Skipped, "not on a cloud that answers") {
					t.Errorf("cloud-metadata: skipped %q, error %q", r.Skipped, r.Error)
				}
			}
			// The other clouds' requests reach the server (one endpoint
			// serves them all here), never one of Azure's.
			if n := asked.Load(); n != 0 {
				t.Errorf("%d requests to Azure's metadata service from a node whose providerID is %s", n, providerID)
			}
		})
	}
}
