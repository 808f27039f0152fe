package cli

import (
	"testing"
)

func TestUseColor(t *testing.T) {
	cases := []struct {
		mode     ColorMode
		terminal bool
		noColor  string
		want     bool
	}{
		{ColorAuto, true, "", true},
		{ColorAuto, true, "1", false},
		{ColorAuto, false, "", false},
		{ColorAlways, false, "1", true},
		{ColorNever, true, "", false},
	}
	for _, tc := range cases {
		if got := UseColor(tc.mode, tc.terminal, tc.noColor); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

func TestParseTarget(t *testing.T) {
	cases := []struct {
		args       []string
		kind, name string
		err        bool
	}{
		{[]string{"pod/web-0"}, "pod", "web-0", false},
		{[]string{"po", "web-0"}, "pod", "web-0", false},
		{[]string{"nodes/ip-1"}, "node", "ip-1", false},
		{[]string{"nodepool.karpenter.sh/gpu"}, "nodepool", "gpu", false},
		{[]string{"web-0"}, "", "", true},
		{[]string{"deployment/web"}, "", "", true},
		{[]string{"pod/"}, "", "", true},
	}
	for _, tc := range cases {
		k, n, err := parseTarget(tc.args)
		if (err != nil) != tc.err || k != tc.kind || n != tc.name {
			t.Errorf("%v: %q %q %v", tc.args, k, n, err)
		}
	}
}
