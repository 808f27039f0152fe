package deploytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/deploy/deploytest/helmrender"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// One control plane for the package: the chart with every feature on is
// installed into it once, in TestMain; the tests then check what the API
// server accepted and how the installed policies and roles behave.
// chart is the chart as the plain manifests and these tests render it, for
// the test API server's Kubernetes version (TestMain sets it).
var chart = helmrender.Release{Chart: ChartDir(), Name: ReleaseName, Namespace: Namespace}

// allFeatures turns every optional part of the chart on.
var allFeatures = helmrender.Values{Files: []string{filepath.Join("testdata", "all-features.yaml")}}

var (
	env       *testenv.Env
	admin     kubernetes.Interface
	dyn       dynamic.Interface
	installed []*unstructured.Unstructured
	// applyErrs holds each object's server-side apply error (nil: accepted).
	applyErrs map[string]error
)

func TestMain(m *testing.M) {
	monitoring, err := testenv.MonitoringCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The engines' NodeClaims and Machines: the controller's deletions of
	// them are guarded by the chart's policies.
	engines, err := testenv.EngineCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The kubelet's lane is the Node authorizer's and NodeRestriction's, as
	// on a real cluster: tests act as system:node:NAME within it.
	flags := map[string]string{"authorization-mode": "Node,RBAC", "enable-admission-plugins": "NodeRestriction"}
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{monitoring, engines}, APIServerFlags: flags}, func(e *testenv.Env) error {
		env, admin = e, e.Client
		var err error
		if dyn, err = dynamic.NewForConfig(e.Config); err != nil {
			return err
		}
		v, err := e.Client.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		chart.KubeVersion = v.GitVersion
		out, err := chart.Template(allFeatures)
		if err != nil {
			return err
		}
		if installed, err = Objects(out); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		applyErrs, err = ApplyAll(ctx, e.Config, installed)
		return err
	})
}

// configFor returns a client config that authenticates with a bearer token
// only (no admin client certificate).
func configFor(token string) *rest.Config {
	c := rest.AnonymousClientConfig(env.Config)
	c.BearerToken = token
	c.QPS, c.Burst = 100, 200
	return c
}

var errNotApplied = errors.New("not applied")
