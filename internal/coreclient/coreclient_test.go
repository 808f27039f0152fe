package coreclient_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/internal/coreclient"
)

// Protobuf asks for protobuf, accepts JSON for kinds without it, and leaves
// the caller's config as it was.
func TestProtobufLeavesTheCallersConfig(t *testing.T) {
	cfg := &rest.Config{Host: "https://example.invalid", QPS: 5}
	got := coreclient.Protobuf(cfg)
	if got.ContentType != runtime.ContentTypeProtobuf || got.AcceptContentTypes != runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON {
		t.Errorf("content type %q, accept %q", got.ContentType, got.AcceptContentTypes)
	}
	if got.Host != cfg.Host || got.QPS != cfg.QPS {
		t.Errorf("the rest of the config was not kept: %+v", got)
	}
	if cfg.ContentType != "" || cfg.AcceptContentTypes != "" {
		t.Error("the caller's config was changed")
	}
}
