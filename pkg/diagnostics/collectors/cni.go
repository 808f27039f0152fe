package collectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// The CNIs nodemend knows write their own logs on the node, outside the
// journal; a bundle keeps them (the newest LogTailBytes of each, redacted
// like every file):
//
//   - the Amazon VPC CNI in /var/log/aws-routed-eni/: ipamd.log (the IP
//     address manager), plugin.log (the CNI binary's ADD/DEL calls),
//     network-policy-agent.log, ebpf-sdk.log, egress-v6-plugin.log and
//     egress-v4-plugin.log; its checkpoint (/var/run/aws-node/ipam.json) and
//     ipamd's introspection and metrics endpoints on localhost;
//   - Cilium's CNI plugin log (/var/run/cilium/cilium-cni.log, the "log-file"
//     of its CNI config);
//   - Calico's CNI plugin log (/var/log/calico/cni/) and calico-node's
//     component logs where they go to files (/var/log/calico/<component>/current).
//
// The agents of the CNIs (aws-node, cilium, calico-node) log to stdout: their
// pod logs are in system/pod-logs.

func cniCollectors(e *Env) []collect.Collector {
	return []collect.Collector{
		filesCollector(e, catNetworking, "vpc-cni-logs", e.tail(), "var/log/aws-routed-eni/*.log"),
		{Name: "networking/vpc-cni-ipamd", Category: catNetworking, Run: e.ipamdState},
		filesCollector(e, catNetworking, "cilium-logs", e.tail(), "var/run/cilium/cilium-cni.log", "run/cilium/cilium-cni.log"),
		filesCollector(e, catNetworking, "calico-logs", e.tail(), "var/log/calico/cni/*.log", "var/log/calico/*/current"),
	}
}

// DefaultIPAMDIntrospection and DefaultIPAMDMetrics are the VPC CNI's
// ipamd introspection and metrics addresses (its defaults, on the host
// network's loopback).
const (
	DefaultIPAMDIntrospection = "127.0.0.1:61679"
	DefaultIPAMDMetrics       = "127.0.0.1:61678"
)

// ipamdEndpoints are the introspection data points of ipamd (the VPC CNI's
// own log collector asks for the same).
func ipamdEndpoints() []string {
	return []string{"enis", "pods", "networkutils-env-settings", "ipamd-env-settings", "eni-configs"}
}

// ipamdState keeps the VPC CNI's checkpoint and what ipamd tells about its
// ENIs, addresses and settings. A node without the VPC CNI has none of it:
// a skip, not an error.
func (e *Env) ipamdState(ctx context.Context, out *collect.Output) error {
	found := false
	var errs []error
	for _, p := range e.glob("var/run/aws-node/ipam.json", "run/aws-node/ipam.json") {
		found = true
		if err := copyHostFile(ctx, out, p, e.hostPath(p), 0); err != nil {
			errs = append(errs, err)
		}
	}
	intro, metrics := e.IPAMDIntrospection, e.IPAMDMetrics
	if intro == "" {
		intro = DefaultIPAMDIntrospection
	}
	if metrics == "" {
		metrics = DefaultIPAMDMetrics
	}
	client := &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	fetch := func(url, file string) bool {
		err := httpToFile(ctx, client, url, out, file)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return false // nothing listens: no ipamd here, or introspection disabled
		}
		if err != nil {
			errs = append(errs, err)
		}
		return true
	}
	for _, ep := range ipamdEndpoints() {
		if !fetch("http://"+intro+"/v1/"+ep, "vpc-cni/ipamd/"+ep+".json") {
			break
		}
		found = true
	}
	if fetch("http://"+metrics+"/metrics", "vpc-cni/ipamd/metrics.txt") {
		found = true
	}
	if !found {
		return collect.Skip("no VPC CNI on this node (no ipamd checkpoint, nothing on %s)", intro)
	}
	return errors.Join(errs...)
}

// httpToFile GETs url into a bundle file; a non-200 answer is an error.
func httpToFile(ctx context.Context, c *http.Client, url string, out *collect.Output, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	dst, err := out.Create(file)
	if err != nil {
		return err
	}
	dst.SetSource("GET " + url)
	_, err = io.Copy(dst, ctxReader{ctx, resp.Body})
	if errors.Is(err, collect.ErrFileLimit) {
		err = nil
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// podLogPatterns are the pods whose container logs a bundle keeps: the
// node's networking (CNI agents, kube-proxy, CoreDNS), storage (CSI node
// plugins) and identity agents, and nodemend's own agent. The kubelet writes
// them as /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log.
func podLogPatterns() []string {
	pods := []string{
		"kube-system_aws-node-*", "kube-system_cni-metrics-helper-*", "kube-system_coredns-*", "kube-system_kube-proxy-*",
		"kube-system_ebs-csi-*", "kube-system_efs-csi-*", "kube-system_fsx-csi-*", "kube-system_fsx-openzfs-csi-*",
		"kube-system_file-cache-csi-*", "kube-system_eks-pod-identity-agent-*",
		"kube-system_cilium-*", "kube-system_calico-node-*", "calico-system_calico-node-*", "calico-system_calico-typha-*",
		"*_nodemend-agent-*",
	}
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = "var/log/pods/" + p + "/*/*.log"
	}
	return out
}

func podLogs(e *Env) collect.Collector {
	c := filesCollector(e, catSystem, "pod-logs", e.tail(), podLogPatterns()...)
	run := c.Run
	c.Run = func(ctx context.Context, out *collect.Output) error {
		err := run(ctx, out)
		var skip *collect.SkipError
		if errors.As(err, &skip) {
			return collect.Skip("no logs of the node's system pods (%s) under /var/log/pods", strings.Join(podNames(), ", "))
		}
		return err
	}
	return c
}

func podNames() []string {
	return []string{"aws-node", "cilium", "calico-node", "kube-proxy", "coredns", "CSI node plugins", "eks-pod-identity-agent", "nodemend-agent"}
}

// bootstrapUnits are the units that prepare an EKS node, whose journals a
// bundle keeps where they exist: nodeadm's two phases (Amazon Linux 2023,
// hybrid nodes), the pause image pull (Amazon Linux 2) and the secondary
// interfaces of multi-card instances.
func bootstrapUnits() []string {
	return []string{"nodeadm-config", "nodeadm-run", "sandbox-image", "configure-multicard-interfaces"}
}

// nodeBootstrap collects those journals and nodeadm's configuration (its
// NodeConfig and drop-ins, and the kubelet configuration drop-ins it
// writes).
func nodeBootstrap(e *Env) []collect.Collector {
	var cs []collect.Collector
	for _, u := range bootstrapUnits() {
		cs = append(cs, collect.Collector{Name: "system/journal-" + u, Category: catSystem, Timeout: time.Minute,
			Run: func(ctx context.Context, out *collect.Output) error {
				if len(e.glob("usr/lib/systemd/system/"+u+".service", "etc/systemd/system/"+u+".service", "lib/systemd/system/"+u+".service")) == 0 {
					return collect.Skip("no %s unit on this node", u)
				}
				return e.journal(ctx, out, "journal/"+u+".log", "--unit="+u+".service")
			}})
	}
	return append(cs, filesCollector(e, catSystem, "nodeadm-config", 0,
		"etc/eks/nodeadm.d/*", "etc/eks/nodeadm-config.yaml", "etc/eks/nodeadm/*.yaml", "etc/eks/nodeadm/*.json",
		"etc/kubernetes/kubelet/config.json.d/*"))
}
