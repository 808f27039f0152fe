package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// The identities deploy/manifests/nodemend.yaml gives nodemend.
const (
	agentServiceAccount      = "nodemend-agent"
	controllerServiceAccount = "nodemend-controller"
	agentPodSelector         = "app.kubernetes.io/name=nodemend-agent"
)

// shippedKinds are the objects of the shipped manifests the simulation
// installs: identities, their RBAC, the admission policies that confine
// an agent to its own node, the agent's config and its DaemonSet (whose
// pods on the kwok nodes are what the agents' tokens are bound to). The
// controller Deployment and its Service are not installed: the
// simulation runs the controller replicas as processes.
var shippedKinds = map[string]bool{
	"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "ConfigMap": true, "DaemonSet": true,
}

var kindLine = regexp.MustCompile(`(?m)^kind: (\S+)$`)

// installIdentities applies the shipped RBAC, admission policies and agent
// DaemonSet, and writes the controller's kubeconfig with a token of its
// ServiceAccount.
func (s *Sim) installIdentities(ctx context.Context) error {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "manifests", "nodemend.yaml"))
	if err != nil {
		return err
	}
	var docs []string
	for _, doc := range strings.Split(string(data), "\n---") {
		if m := kindLine.FindStringSubmatch(doc); m != nil && shippedKinds[m[1]] {
			docs = append(docs, doc)
		}
	}
	if err := s.Apply(ctx, strings.Join(docs, "\n---\n")); err != nil {
		return fmt.Errorf("installing deploy/manifests/nodemend.yaml's RBAC and admission policies: %w", err)
	}
	tr, err := s.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, controllerServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	s.controllerKubeconfig = filepath.Join(s.Dir, "nodemend-controller.kubeconfig")
	return s.writeTokenKubeconfig(s.controllerKubeconfig, tr.Status.Token)
}

// agentKubeconfig waits for the agent DaemonSet's pod on node and writes a
// kubeconfig with a token bound to that pod: the API server then names the
// node in the token's user (authentication.kubernetes.io/node-name), which
// the admission policy checks every write against.
func (s *Sim) agentKubeconfig(ctx context.Context, node string) (string, error) {
	var podName string
	var podUID string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: agentPodSelector, FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		podName, podUID = pods.Items[0].Name, string(pods.Items[0].UID)
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("no nodemend-agent DaemonSet pod scheduled to %s: %w", node, err)
	}
	tr, err := s.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, agentServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr(int64(6 * 3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: podName, UID: types.UID(podUID)},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	path := s.AgentKubeconfig(node)
	return path, s.writeTokenKubeconfig(path, tr.Status.Token)
}

// AgentKubeconfig is the kubeconfig the agent of node runs with
// (LeastPrivilege).
func (s *Sim) AgentKubeconfig(node string) string {
	return filepath.Join(s.Dir, "nodes", node+".kubeconfig")
}

func (s *Sim) writeTokenKubeconfig(path, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sim"] = &clientcmdapi.Cluster{Server: s.Config.Host, CertificateAuthorityData: s.Config.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sim"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "sa"}
	cfg.CurrentContext = "sim"
	return clientcmd.WriteToFile(*cfg, path)
}

func ptr[T any](v T) *T { return &v }
