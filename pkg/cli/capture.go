package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
)

type captureOptions struct {
	iface        string
	filter       string
	duration     time.Duration
	output       string
	uploadURLs   []string
	timeout      time.Duration
	agentTimeout time.Duration
	poll         time.Duration
	keep         bool
	progress     string
	s3           s3Options
	// post is the presigned POST policy of --s3; s3Prefix its key prefix.
	post     *v1alpha1.PostUpload
	s3Prefix string
}

// uploading: the agent uploads the chunks; nothing is downloaded.
func (o *captureOptions) uploading() bool { return len(o.uploadURLs) > 0 || o.s3.enabled() }

func newCaptureCommand(g *Global, s Streams) *cobra.Command {
	o := &captureOptions{poll: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "capture NODE",
		Short: "Capture packets on a node, without SSH, and download the capture",
		Long: `capture asks the nodemend-agent on NODE to run tcpdump (a NodeDiagnostic with a
packetCapture), shows the packets and bytes captured as it runs, downloads the capture through
the API server's node proxy (/api/v1/nodes/NODE/proxy/logs/nodemend/FILE) and deletes the
object. Interrupting it (Ctrl-C) deletes the object, which stops the capture on the node.

The file is one gzip-compressed pcap stream: Wireshark and tshark open it as it is, and
tcpdump reads it with "zcat FILE | tcpdump -nr -". On the node it is capped by the agent's
capture budget (512 MiB compressed by default) and stops early if the node's disk is 90% full.

With --upload-url (repeated: one pre-signed PUT URL per chunk, as pre-signed URLs are signed
per object) the agent uploads compressed chunks as they close and nothing is downloaded.
With --s3 BUCKET the plugin presigns one S3 POST policy with your AWS credentials (the AWS
SDK's standard chain; --profile, --region) for every chunk of the capture, and the agent posts
each chunk as it closes to s3://BUCKET/[--key PREFIX/]NODE/TIME-capture/CHUNK, CHUNK the
chunk's file name (nodediagnostic-OBJECT-TIME-00000.pcap.gz, -00001, ...).

The interface must be a network interface of the node (or "any"); the filter is pcap-filter
syntax, passed to tcpdump as one argument, never through a shell.

Needs: create/get/delete nodediagnostics.nodemend.dev, get nodes, and get nodes/proxy (to
download).`,
		Example: `  kubectl mend capture ip-10-0-1-23.ec2.internal --interface any --filter "tcp port 443" --duration 2m
  kubectl mend capture ip-10-0-1-23.ec2.internal -i eth0 --filter "host 10.0.7.12 and port 53" -o /tmp/dns.pcap.gz
  wireshark ip-10-0-1-23.ec2.internal-20260612T103000Z.pcap.gz
  kubectl mend capture ip-10-0-1-23.ec2.internal -i any -d 10m --s3 my-bucket --key captures --region us-east-1`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error {
			return o.validate(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, s, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.iface, "interface", "i", "any", `network interface of the node, or "any"`)
	fl.StringVarP(&o.filter, "filter", "f", "", `pcap-filter expression, e.g. "tcp port 443 and host 10.0.0.1"`)
	fl.DurationVarP(&o.duration, "duration", "d", time.Minute, "how long to capture, at most 1h")
	fl.StringVarP(&o.output, "output", "o", ".", "file, or existing directory, to save the capture in (default ./NODE-TIME.pcap.gz)")
	fl.StringArrayVar(&o.uploadURLs, "upload-url", nil, "HTTPS URL the agent PUTs a chunk to, once per chunk; nothing is downloaded")
	fl.DurationVarP(&o.timeout, "timeout", "t", 0, "give up after this long (default: the duration and 5 minutes)")
	fl.DurationVar(&o.agentTimeout, "agent-timeout", 30*time.Second, "how long to wait for the node's agent to pick the request up")
	fl.BoolVar(&o.keep, "keep", false, "keep the NodeDiagnostic object instead of deleting it (the file stays on the node for 10 minutes)")
	o.s3.addFlags(fl, "the capture's chunks")
	fl.StringVar(&o.progress, "progress", ProgressAuto, "progress display: auto (redrawn in place on a terminal, plain lines otherwise), live or plain")
	return cmd
}

// validate refuses, before anything is created, what the CRD and the
// agent would refuse.
func (o *captureOptions) validate(node string) error {
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return fmt.Errorf("%q is not a node name: %s", termsafe.String(node), strings.Join(errs, "; "))
	}
	if err := pcap.ValidateInterface(o.iface); err != nil {
		return fmt.Errorf("--interface: %w", err)
	}
	if err := pcap.ValidateFilter(o.filter); err != nil {
		return fmt.Errorf("--filter: %w", err)
	}
	if o.duration < time.Second || o.duration > time.Hour {
		return fmt.Errorf("--duration %v: between 1s and 1h", o.duration)
	}
	if len(o.uploadURLs) > 100 {
		return errors.New("--upload-url: at most 100 URLs")
	}
	for _, u := range o.uploadURLs {
		if !strings.HasPrefix(u, "https://") {
			return errors.New("--upload-url must be an https:// URL")
		}
	}
	if len(o.uploadURLs) > 0 && o.s3.enabled() {
		return errors.New("--upload-url and --s3 are two destinations: give one")
	}
	if err := o.s3.validate(); err != nil {
		return err
	}
	if o.timeout == 0 {
		o.timeout = o.duration + 5*time.Minute
	}
	return nil
}

func (o *captureOptions) run(ctx context.Context, g *Global, s Streams, node string) error {
	if err := o.validate(node); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	need := []Access{
		{Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to request the capture"},
		{Verb: "get", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to follow its progress"},
		{Verb: "delete", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to stop and clean up"},
		{Verb: "get", Resource: "nodes", Why: "to find the node"},
	}
	if !o.uploading() {
		need = append(need, Access{Verb: "get", Resource: "nodes", Subresource: "proxy", Why: "to download the capture through the API server's node proxy; use --upload-url or --s3 otherwise"})
	}
	if o.s3.enabled() {
		p, err := o.s3.presigner(ctx)
		if err != nil {
			return err
		}
		o.s3Prefix = o.s3.captureKeyPrefix(node, time.Now())
		// A chunk closes at the first packet after the chunk size: allow
		// one packet of tcpdump's largest snap length more.
		if o.post, err = p.post(ctx, o.s3Prefix, diagnostics.DefaultChunkBytes+pcap.MaxRecordBytes); err != nil {
			return err
		}
	}
	c, err := g.NodeDiagnosticClients(ctx, need...)
	if err != nil {
		return err
	}
	if _, err := c.Core.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found", node)
	} else if err != nil {
		return Explain(err, "reading node "+node)
	}
	prog, err := newProgress(s.Out, []string{node}, o.progress)
	if err != nil {
		return err
	}
	phase, detail, err := o.capture(ctx, c, prog, node)
	if err != nil {
		prog.Finish(node, "failed", true, "%v", err)
	} else {
		prog.Finish(node, phase, false, "%s", detail)
	}
	prog.Close()
	return err
}

func (o *captureOptions) spec(node string) v1alpha1.NodeDiagnosticSpec {
	pc := &v1alpha1.PacketCaptureSpec{Interface: o.iface, Filter: o.filter, Duration: metav1.Duration{Duration: o.duration}}
	switch {
	case o.post != nil:
		pc.Upload = o.post
	case len(o.uploadURLs) == 0:
		pc.Destination = v1alpha1.DestinationNode
	}
	for _, u := range o.uploadURLs {
		pc.UploadURLs = append(pc.UploadURLs, v1alpha1.UploadURL(u))
	}
	return v1alpha1.NodeDiagnosticSpec{NodeName: node, PacketCapture: pc}
}

// capture runs one capture and says how it ended.
func (o *captureOptions) capture(ctx context.Context, c *Clients, prog *Progress, node string) (phase, detail string, err error) {
	prog.Update(node, "validating", "requesting a capture on %s", o.iface)
	obj := &v1alpha1.NodeDiagnostic{
		ObjectMeta: metav1.ObjectMeta{GenerateName: truncate(node, 50) + "-capture-", Labels: map[string]string{managedByLabel: managedBy}},
		Spec:       o.spec(node),
	}
	created, err := c.ND.Create(ctx, obj)
	if err != nil {
		if apierrors.IsInvalid(err) {
			return "", "", fmt.Errorf("the API server refused the request: %v", apierrors.ReasonForError(err))
		}
		return "", "", Explain(err, "creating a nodediagnostic")
	}
	if !o.keep {
		defer func() {
			// The run's context may be over (Ctrl-C, timeout): deleting
			// the object is what stops the capture on the node.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.ND.Delete(dctx, created.Name); err != nil && !apierrors.IsNotFound(err) {
				prog.Update(node, "warning", "could not delete nodediagnostic/%s: %v", created.Name, err)
			}
		}()
	}
	prog.Update(node, "validating", "created nodediagnostic/%s", created.Name)
	done, err := o.wait(ctx, c, prog, node, created)
	if err != nil {
		return "", "", err
	}
	st := done.Status.PacketCapture
	summary := fmt.Sprintf("%d packets, %s captured", st.Packets, bytecount.Human(st.CapturedBytes))
	if st.Truncated {
		summary += ", stopped early"
	}
	if o.post != nil {
		return "uploaded", fmt.Sprintf("%d chunks (%s) to s3://%s/%s; %s", st.ChunksUploaded, bytecount.Human(st.SizeBytes), o.s3.bucket, o.s3Prefix, summary), nil
	}
	if len(o.uploadURLs) > 0 {
		return "uploaded", fmt.Sprintf("%d chunks (%s) to %s; %s", st.ChunksUploaded, bytecount.Human(st.SizeBytes), hostOf(o.uploadURLs[0]), summary), nil
	}
	dir, path, err := o.path(node, st)
	if err != nil {
		return "", "", err
	}
	prog.Update(node, "downloading", "%s (%s)", st.FileName, bytecount.Human(st.SizeBytes))
	err = fetchNodeFile(ctx, c, node, st.FileName, st.SizeBytes, dir, path, func(n int64) {
		prog.Tick(node, "downloading", "%s / %s", bytecount.Human(n), bytecount.Human(st.SizeBytes))
	}, "use --upload-url")
	if err != nil {
		return "", "", err
	}
	return "saved", fmt.Sprintf("%s (%s; %s); open it with Wireshark, or: zcat %s | tcpdump -nr -", path, bytecount.Human(st.SizeBytes), summary, path), nil
}

// path is where the capture is saved, and the directory it is saved in
// (nothing below which is followed if it is a symbolic link): --output if it
// names a file, else NODE-TIME.pcap.gz in that directory (TIME the capture's
// start).
func (o *captureOptions) path(node string, st *v1alpha1.CaptureStatus) (dir, path string, err error) {
	fi, err := os.Stat(o.output)
	isDir := err == nil && fi.IsDir() || strings.HasSuffix(o.output, string(filepath.Separator))
	if err != nil && !os.IsNotExist(err) {
		return "", "", err
	}
	if !isDir {
		return filepath.Dir(o.output), o.output, nil
	}
	start := time.Now()
	if st.StartTime != nil {
		start = st.StartTime.Time
	}
	// The node name was checked (a DNS subdomain: no separators).
	return o.output, filepath.Join(o.output, node+"-"+start.UTC().Format("20060102T150405Z")+".pcap.gz"), nil
}

// wait follows the capture until it is final, showing what was captured.
func (o *captureOptions) wait(ctx context.Context, c *Clients, prog *Progress, node string, obj *v1alpha1.NodeDiagnostic) (*v1alpha1.NodeDiagnostic, error) {
	return followCapture(ctx, c, prog, node, obj, captureFollow{
		agentTimeout: o.agentTimeout, poll: o.poll,
		status: func(st *v1alpha1.NodeDiagnosticStatus) *v1alpha1.CaptureStatus { return st.PacketCapture },
		failed: "the agent could not capture",
		stopped: func(waited time.Duration, last string) error {
			return fmt.Errorf("stopped after %v while %s", waited.Round(time.Second), last)
		},
		running: func(st *v1alpha1.CaptureStatus) string {
			left := ""
			if st.StartTime != nil {
				left = fmt.Sprintf(", %v left", max(time.Until(st.StartTime.Add(o.duration)).Round(time.Second), 0))
			}
			detail := fmt.Sprintf("%d packets, %s (%s compressed)%s", st.Packets, bytecount.Human(st.CapturedBytes), bytecount.Human(st.SizeBytes), left)
			if st.ChunksUploaded > 0 {
				detail += fmt.Sprintf(", %d chunks uploaded", st.ChunksUploaded)
			}
			prog.Tick(node, "capturing", "%s", detail)
			return "capturing"
		},
	})
}
