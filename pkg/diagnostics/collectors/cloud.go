package collectors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// cloudMetadata writes the instance's metadata (identity, placement, image,
// network interfaces, scheduled events) as the cloud's metadata service
// answers it, one file per path under cloud/<cloud>/ (cloud/aws/meta-data/…,
// cloud/gce/instance/…, cloud/azure/metadata/instance), and a summary a
// human reads first. A node on no cloud that answers gets nothing but the skip
// note in the manifest.
func cloudMetadata(e *Env) collect.Collector {
	return collect.Collector{Name: "base/cloud-metadata", Category: catBase, Run: func(ctx context.Context, out *collect.Output) error {
		if e.Cloud == nil {
			return collect.Skip("%v (no metadata service configured)", cloudmeta.ErrNoCloud)
		}
		docs, err := e.Cloud.Documents(ctx)
		if len(docs) == 0 {
			if err == nil || errors.Is(err, cloudmeta.ErrNoCloud) {
				return collect.Skip("%s", noCloudNote(err))
			}
			return err
		}
		cloud := e.Cloud.Cloud()
		byPath := map[string][]byte{}
		for _, d := range docs {
			byPath[d.Path] = d.Data
			if werr := out.WriteFile("cloud/"+cloud+"/"+d.Path, withNewline(d.Data)); werr != nil {
				return werr
			}
		}
		if werr := out.WriteFile("cloud/instance.txt", instanceSummary(cloud, byPath)); werr != nil {
			return werr
		}
		return err
	}}
}

func noCloudNote(err error) string {
	if err == nil {
		return cloudmeta.ErrNoCloud.Error()
	}
	return err.Error()
}

func withNewline(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return append(append([]byte{}, b...), '\n')
	}
	return b
}

// instanceSummary is the instance's identity in a few lines.
func instanceSummary(cloud string, docs map[string][]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "cloud:             %s\n", cloud)
	for _, f := range []struct{ label, path string }{
		// GCE's paths; AWS's below.
		{"instance-id", "instance/id"},
		{"machine-type", "instance/machine-type"},
		{"zone", "instance/zone"},
		{"image", "instance/image"},
		{"maintenance", "instance/maintenance-event"},
		{"preempted", "instance/preempted"},
		{"instance-id", "meta-data/instance-id"},
		{"instance-type", "meta-data/instance-type"},
		{"lifecycle", "meta-data/instance-life-cycle"},
		{"ami-id", "meta-data/ami-id"},
		{"region", "meta-data/placement/region"},
		{"availability-zone", "meta-data/placement/availability-zone"},
		{"zone-id", "meta-data/placement/availability-zone-id"},
		{"local-ipv4", "meta-data/local-ipv4"},
	} {
		if v, ok := docs[f.path]; ok {
			fmt.Fprintf(&b, "%-18s %s\n", f.label+":", strings.TrimSpace(string(v)))
		}
	}
	if evs, err := cloudmeta.ParseIMDSScheduled(docs["meta-data/events/maintenance/scheduled"]); err == nil {
		for _, ev := range evs {
			fmt.Fprintf(&b, "scheduled event:   %s %s from %s (%s)\n", ev.Code, ev.ID, ev.NotBefore.UTC().Format("2006-01-02T15:04:05Z"), ev.Description)
		}
	}
	azureSummary(&b, docs)
	if raw, ok := docs["meta-data/spot/instance-action"]; ok {
		var a struct{ Action, Time string }
		if json.Unmarshal(raw, &a) == nil {
			fmt.Fprintf(&b, "spot interruption: %s at %s\n", a.Action, a.Time)
		}
	}
	return b.Bytes()
}

// azureSummary adds Azure's identity and scheduled events: its instance
// document is one JSON object, not a path per value.
func azureSummary(b *bytes.Buffer, docs map[string][]byte) {
	raw, ok := docs["metadata/instance"]
	if !ok {
		return
	}
	var inst struct {
		Compute struct {
			VMID, Name, VMSize, Location, Zone, Priority, VMScaleSetName, ResourceID string
		}
	}
	if json.Unmarshal(raw, &inst) != nil {
		return
	}
	c := inst.Compute
	for _, f := range []struct{ label, v string }{
		{"vm-id", c.VMID}, {"name", c.Name}, {"vm-size", c.VMSize}, {"location", c.Location}, {"zone", c.Zone},
		{"priority", c.Priority}, {"scale-set", c.VMScaleSetName}, {"resource-id", c.ResourceID},
	} {
		if f.v != "" {
			fmt.Fprintf(b, "%-18s %s\n", f.label+":", f.v)
		}
	}
	evs, err := cloudmeta.ParseAzureScheduledEvents(docs["metadata/scheduledevents"], c.Name)
	if err != nil {
		return
	}
	for _, ev := range evs {
		when := "now"
		if !ev.NotBefore.IsZero() {
			when = "from " + ev.NotBefore.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(b, "scheduled event:   %s %s %s (%s)\n", ev.Code, ev.ID, when, ev.Description)
	}
}
