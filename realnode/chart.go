package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Namespace and Release are where start installs the chart.
const (
	Namespace = "nodemend-system"
	Release   = "nodemend"
)

// splitRef splits registry/repository:tag into the chart's three values.
func splitRef(ref string) (registry, repository, tag string, err error) {
	i := strings.LastIndexByte(ref, '/')
	j := strings.LastIndexByte(ref, ':')
	if i <= 0 || j < i {
		return "", "", "", fmt.Errorf("image %q: want registry/repository:tag", ref)
	}
	return ref[:i], ref[i+1 : j], ref[j+1:], nil
}

// RebootHook is the host file the agent's reboot mechanism touches on this
// node instead of rebooting: the node is the machine it runs on, so every
// setting that would let the agent act on its host beyond reading it points
// at a hook here (accelerator resets are off).
const RebootHook = "/var/log/nodemend/real-node-reboot-hook"

// chartValues are the values this node needs: the local images (never
// pulled: there is no registry), the node's own paths and ports where
// they differ from a stock node's, the reboot hook, and AWS's metadata mock
// on loopback as the agent's cloud metadata service.
func (l Layout) chartValues(imgs Images) (string, error) {
	areg, arepo, atag, err := splitRef(imgs.Agent)
	if err != nil {
		return "", err
	}
	creg, crepo, ctag, err := splitRef(imgs.Controller)
	if err != nil {
		return "", err
	}
	if areg != creg {
		return "", fmt.Errorf("the agent (%s) and controller (%s) images must share a registry: the chart has one image.registry", imgs.Agent, imgs.Controller)
	}
	return fmt.Sprintf(`# Written by hack/real-node.sh for the node %s.
image:
  registry: %s
  pullPolicy: Never
agent:
  image: {repository: %s, tag: %q}
  config:
    monitors:
      containerRuntime:
        criSocket: %s
      networking:
        kubeProxyHealthz: 127.0.0.1:%d
      storage:
        filesystems: [/, %s, %s]
  remediation:
    reboot: command
    rebootCommand: [/usr/bin/touch, /host%s]
    acceleratorReset: false
  cloudMetadata:
    cloud: aws
    endpoint: http://127.0.0.1:%d
controller:
  image: {repository: %s, tag: %q}
`, l.NodeName, areg, arepo, atag, l.CRISocket(), l.Ports.ProxyHealthz, l.KubeletRoot(), l.ContainerdRoot(), RebootHook, l.Ports.Metadata, crepo, ctag), nil
}

// installChart installs deploy/helm/nodemend as docs/install.md says —
// the namespace labelled for the privileged agent, then helm install —
// and waits for the agent and the controller to run.
func (l Layout) installChart(ctx context.Context, c kubernetes.Interface, helm string, imgs Images, extra []string) error {
	values, err := l.chartValues(imgs)
	if err != nil {
		return err
	}
	vf := filepath.Join(l.State, "values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	args := []string{"install", Release, filepath.Join(l.Repo, "deploy", "helm", "nodemend"),
		"--kubeconfig", l.Admin(), "--namespace", Namespace, "--values", vf}
	for _, v := range extra {
		args = append(args, "--values", v)
	}
	args = append(args, "--wait", "--timeout", "5m")
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Dir = l.Repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install: %v: %s\n%s", err, out, l.logTail("kubelet", 10))
	}
	return nil
}

// Helm runs helm against the node (the tests upgrade the release).
func (l Layout) Helm(ctx context.Context, helm string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", l.Admin())...)
	cmd.Dir = l.Repo
	return cmd.CombinedOutput()
}
