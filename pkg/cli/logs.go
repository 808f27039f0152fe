package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/internal/mendclient"
)

type logsOptions struct {
	selector     string
	uploadURL    string
	categories   []string
	outputDir    string
	since        time.Duration
	timeout      time.Duration
	agentTimeout time.Duration
	poll         time.Duration
	keep         bool
	fresh        bool
	flat         bool
	parallel     int
	gpuLevel     int32
	progress     string
	s3           s3Options
	// uploads are the presigned URLs of --s3, by node; s3Keys their keys.
	uploads map[string]string
	s3Keys  map[string]string
}

// uploading: the agents upload the bundles; nothing is downloaded.
func (o *logsOptions) uploading() bool { return o.uploadURL != "" || o.s3.enabled() }

func newLogsCommand(g *Global, s Streams) *cobra.Command {
	o := &logsOptions{poll: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "logs (NODE... | -l SELECTOR)",
		Short: "Collect a redacted diagnostic bundle from nodes, without SSH",
		Long: `logs asks the nodemend-agent on each node for a diagnostic bundle (a NodeDiagnostic
object), shows its progress, downloads the bundle through the API server's node proxy
(/api/v1/nodes/NODE/proxy/logs/nodemend/FILE, served by the kubelet) into --output, and
deletes the object. Secrets are redacted on the node, before anything leaves it.

Many nodes are handled --parallel at a time, with one progress display (redrawn in place
on a terminal, one line per change otherwise); a node that fails does not stop the others,
whose bundles are saved, and the exit status is non-zero if any failed. --flat saves
DIR/NODE-logs.tar.gz, as kubectl ekslogs does, instead of DIR/NODE/FILE.

With --upload-url the agent PUTs the bundle to that HTTPS URL (for example a pre-signed
object-store URL) instead, and nothing is downloaded. With --s3 BUCKET (as kubectl ekslogs
--s3) the plugin presigns one PUT per node with your AWS credentials (the AWS SDK's standard
chain; --profile, --region) and every agent uploads its bundle to
s3://BUCKET/[--key PREFIX/]NODE/TIME-logs.tar.gz, TIME the run's start (20240612T103000Z).

With --gpu-diagnostic[=LEVEL] the agent first runs NVIDIA DCGM's diagnostic (the
NodeDiagnostic's gpuDiagnostic) at that level, 1 quick (the default) to 4 extended, where
DCGM runs; dcgmi's JSON result is saved beside the bundle (DIR/NODE/FILE-gpu-diagnostic.json,
with --flat DIR/NODE-gpu-diagnostic.json) and the bundle carries it too; a failed test is
reported on the node (DCGMDiagnosticFailure). The diagnostic loads the GPUs: drain the node
first. The level goes after "=": in "--gpu-diagnostic 2" the 2 is an argument.

Needs: create/get/list/delete nodediagnostics.nodemend.dev, get nodes, and get nodes/proxy
(to download).`,
		Example: `  kubectl mend logs ip-10-0-1-23.ec2.internal
  kubectl mend logs --flat ip-10-0-1-23.ec2.internal ip-10-0-1-24.ec2.internal   # ./NODE-logs.tar.gz, like kubectl ekslogs
  kubectl mend logs -l node.kubernetes.io/instance-type=p5.48xlarge --categories base,kernel,accelerators -o ./bundles
  kubectl mend logs ip-10-0-1-23.ec2.internal --upload-url "$(aws s3 presign ... )"
  kubectl mend logs -l karpenter.sh/nodepool=gpu --s3 my-bucket --key incidents/INC-42 --region us-east-1
  kubectl mend logs ip-10-0-1-23.ec2.internal --gpu-diagnostic=2 --categories accelerators`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, s, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.selector, "selector", "l", "", "label selector of the nodes")
	fl.StringVar(&o.uploadURL, "upload-url", "", "HTTPS URL the agent PUTs the bundle to (one node only); nothing is downloaded")
	fl.StringSliceVar(&o.categories, "categories", nil, "categories to collect (default all): "+strings.Join(categoryNames(), ","))
	fl.StringVarP(&o.outputDir, "output", "o", ".", "directory the bundles are saved in")
	fl.StringVar(&o.outputDir, "output-dir", ".", "the same as --output (kubectl ekslogs' name)")
	fl.BoolVar(&o.flat, "flat", false, "save DIR/NODE-logs.tar.gz (as kubectl ekslogs does) instead of DIR/NODE/FILE; an existing file is replaced")
	fl.StringVar(&o.progress, "progress", ProgressAuto, "progress display: auto (redrawn in place on a terminal, plain lines otherwise), live or plain")
	fl.DurationVar(&o.since, "since", 0, "how far back time-based logs go (default: the agent's, 24h)")
	fl.DurationVarP(&o.timeout, "timeout", "t", 5*time.Minute, "give up after this long")
	fl.DurationVar(&o.agentTimeout, "agent-timeout", 30*time.Second, "how long to wait for the node's agent to pick the request up")
	fl.BoolVar(&o.keep, "keep", false, "keep the NodeDiagnostic objects instead of deleting them")
	fl.BoolVar(&o.fresh, "fresh", false, "always collect a new bundle instead of reusing a recent one")
	fl.IntVar(&o.parallel, "parallel", 8, "nodes handled at once")
	o.s3.addFlags(fl, "the bundles")
	fl.Int32Var(&o.gpuLevel, "gpu-diagnostic", 0, "run DCGM's GPU diagnostic first, at level 1 (quick) or --gpu-diagnostic=LEVEL (1-4); its JSON result is saved beside the bundle and goes into it (default --timeout then: the diagnostic's own plus 5m)")
	// A bare --gpu-diagnostic is the API's default level.
	fl.Lookup("gpu-diagnostic").NoOptDefVal = "1"
	// Validation before RunE, so that the docs' examples are checked
	// without a cluster (docs_examples_test.go).
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if o.gpuLevel > 0 && !cmd.Flags().Changed("timeout") {
			o.timeout = v1alpha1.DefaultGPUDiagnosticTimeout(o.gpuLevel) + 5*time.Minute
		}
		return o.validate(args)
	}
	return cmd
}

func categoryNames() []string {
	var out []string
	for _, c := range v1alpha1.AllLogCategories() {
		out = append(out, string(c))
	}
	return out
}

func (o *logsOptions) validate(args []string) error {
	if (len(args) == 0) == (o.selector == "") {
		return errors.New("name nodes, or select them with -l, not both")
	}
	if o.uploadURL != "" && len(args) != 1 {
		return errors.New("--upload-url takes exactly one node: every bundle needs its own URL")
	}
	if o.uploadURL != "" && !strings.HasPrefix(o.uploadURL, "https://") {
		return errors.New("--upload-url must be an https:// URL")
	}
	if o.uploadURL != "" && o.s3.enabled() {
		return errors.New("--upload-url and --s3 are two destinations: give one")
	}
	if err := o.s3.validate(); err != nil {
		return err
	}
	for _, c := range o.categories {
		if !slices.Contains(categoryNames(), c) {
			return fmt.Errorf("unknown category %q (known: %s)", c, strings.Join(categoryNames(), ", "))
		}
	}
	if o.parallel < 1 {
		o.parallel = 1
	}
	if o.gpuLevel < 0 || o.gpuLevel > 4 {
		return fmt.Errorf("--gpu-diagnostic %d: the DCGM levels are 1 to 4", o.gpuLevel)
	}
	if o.gpuLevel > 0 {
		// "--gpu-diagnostic 2" reads 2 as a node: the level takes "=".
		for _, a := range args {
			if len(a) == 1 && a[0] >= '1' && a[0] <= '4' {
				return fmt.Errorf("%q is not a node: write the level as --gpu-diagnostic=%s", a, a)
			}
		}
	}
	return nil
}

func (o *logsOptions) run(ctx context.Context, g *Global, s Streams, args []string) error {
	if err := o.validate(args); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	need := []Access{
		{Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to request a bundle"},
		{Verb: "get", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to follow its progress"},
		{Verb: "list", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to reuse a recent bundle"},
		{Verb: "delete", Group: v1alpha1.GroupVersion.Group, Resource: mendclient.Resource, Why: "to clean up"},
		{Verb: "get", Resource: "nodes", Why: "to find the nodes"},
	}
	if !o.uploading() {
		need = append(need, Access{Verb: "get", Resource: "nodes", Subresource: "proxy", Why: "to download bundles through the API server's node proxy; use --upload-url or --s3 otherwise"})
	}
	var s3p *s3Presigner
	if o.s3.enabled() {
		// Before anything is created: no credentials, no requests.
		var err error
		if s3p, err = o.s3.presigner(ctx); err != nil {
			return err
		}
	}
	c, err := g.NodeDiagnosticClients(ctx, need...)
	if err != nil {
		return err
	}
	nodes, err := o.nodes(ctx, c, args)
	if err != nil {
		return err
	}
	if s3p != nil {
		start := time.Now()
		o.uploads, o.s3Keys = map[string]string{}, map[string]string{}
		for _, n := range nodes {
			key := o.s3.logsKey(n, start)
			u, err := s3p.put(ctx, key)
			if err != nil {
				return err
			}
			o.uploads[n], o.s3Keys[n] = u, key
		}
	}
	if !o.uploading() {
		if err := os.MkdirAll(o.outputDir, 0o755); err != nil {
			return err
		}
	}
	prog, err := newProgress(s.Out, nodes, o.progress)
	if err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, o.parallel)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			phase, detail, err := o.node(ctx, c, prog, n)
			if errs[i] = err; err != nil {
				prog.Finish(n, "failed", true, "%v", err)
				return
			}
			prog.Finish(n, phase, false, "%s", detail)
		}()
	}
	wg.Wait()
	prog.Close()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", nodes[i], err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d nodes failed (the others' bundles are saved):\n  %s", len(failed), len(nodes), strings.Join(failed, "\n  "))
	}
	return nil
}

// nodes resolves the named or selected nodes.
func (o *logsOptions) nodes(ctx context.Context, c *Clients, names []string) ([]string, error) {
	if o.selector == "" {
		for _, n := range names {
			if _, err := c.Core.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("node %q not found", n)
			} else if err != nil {
				return nil, Explain(err, "reading node "+n)
			}
		}
		return names, nil
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return nil, fmt.Errorf("-l: %w", err)
	}
	list, err := c.Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, Explain(err, "listing nodes")
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("no nodes match %q", o.selector)
	}
	return out, nil
}

// node gets one node's bundle, and says how it ended.
func (o *logsOptions) node(ctx context.Context, c *Clients, prog *Progress, node string) (phase, detail string, err error) {
	prog.Update(node, "validating", "requesting a bundle")
	obj, err := o.obtain(ctx, c, prog, node)
	if err != nil {
		return "", "", err
	}
	if !o.keep {
		defer func() {
			// The run's context may be over; cleaning up still matters.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.ND.Delete(dctx, obj.Name); err != nil && !apierrors.IsNotFound(err) {
				prog.Update(node, "warning", "could not delete nodediagnostic/%s: %v", obj.Name, err)
			}
		}()
	}
	done, err := o.wait(ctx, c, prog, node, obj)
	if err != nil {
		return "", "", err
	}
	st := done.Status.LogCapture
	if o.uploadURL != "" {
		return "uploaded", fmt.Sprintf("%s (%s)", hostOf(o.uploadURL), bytecount.Human(st.SizeBytes)), nil
	}
	if key, ok := o.s3Keys[node]; ok {
		return "uploaded", fmt.Sprintf("s3://%s/%s (%s)", o.s3.bucket, key, bytecount.Human(st.SizeBytes)), nil
	}
	path, err := o.download(ctx, c, prog, node, st)
	if err != nil {
		return "", "", err
	}
	note := ""
	if len(st.Errors) > 0 {
		note = fmt.Sprintf(", %d collectors failed (see manifest.json)", len(st.Errors))
	}
	if g := done.Status.GPUDiagnostic; g != nil && g.Generation == done.Generation {
		note += ", " + gpuNote(g)
		if g.FileName != "" {
			gpath, err := o.downloadGPUResult(ctx, c, prog, node, g)
			if err != nil {
				return "", "", fmt.Errorf("the bundle is saved as %s, but not the GPU diagnostic's result: %w", path, err)
			}
			note += "; result " + gpath
		}
	}
	return "saved", fmt.Sprintf("%s (%s%s)", path, bytecount.Human(st.SizeBytes), note), nil
}

// hostOf is the host of an upload URL, to tell where a bundle went without
// printing its signed query.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the upload URL"
	}
	return u.Host
}
