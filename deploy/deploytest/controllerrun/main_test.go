// Package controllerrun runs the real repair controller with only its
// ServiceAccount's token against the chart's RBAC. It is apart from
// deploytest because a binary that links both the controller (kubectl's
// drain library pulls in package plugin, so the linker binds every symbol at
// start) and the agent (go-nvml, whose NVML symbols resolve only when
// libnvidia-ml is loaded) cannot start where NVML is absent; the real
// binaries never link both.
package controllerrun

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"nodemend.dev/nodemend/deploy/deploytest"
	"nodemend.dev/nodemend/deploy/deploytest/helmrender"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var (
	env   *testenv.Env
	admin kubernetes.Interface
)

func TestMain(m *testing.M) {
	// The engines' CRDs make the controller watch Cluster API Machines,
	// which its RBAC must allow.
	engines, err := testenv.EngineCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{engines}}, func(e *testenv.Env) error {
		env, admin = e, e.Client
		v, err := e.Client.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		chart := helmrender.Release{Chart: deploytest.ChartDir(), Name: deploytest.ReleaseName, Namespace: deploytest.Namespace, KubeVersion: v.GitVersion}
		out, err := chart.Manifests()
		if err != nil {
			return err
		}
		objs, err := deploytest.Objects(out)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		results, err := deploytest.ApplyAll(ctx, e.Config, objs)
		if err != nil {
			return err
		}
		for key, err := range results {
			if err != nil {
				return fmt.Errorf("installing the manifests: %s: %w", key, err)
			}
		}
		return nil
	})
}

// controllerConfig is a client config with only a token of the controller's
// ServiceAccount, as its pods get.
func controllerConfig(t *testing.T) *rest.Config {
	t.Helper()
	tr := deploytest.Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(deploytest.Namespace).CreateToken(t.Context(), "nodemend-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{}))
	c := rest.AnonymousClientConfig(env.Config)
	c.BearerToken = tr.Status.Token
	c.QPS, c.Burst = 100, 200
	return c
}
