package config

import (
	"os"
	"path/filepath"
	"testing"
)

// A read that caught the file while it was being rewritten (os.WriteFile
// truncates first: the file reads empty, which parses as the defaults) is
// not what gets applied: the content it settles to is.
func TestSettledIgnoresAFileCaughtMidRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	final := "monitors:\n  containerRuntime:\n    enabled: true\n    colour: red\n"
	if err := os.WriteFile(path, []byte(final), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := settled(path, nil) // the first read saw the truncated file
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != final {
		t.Fatalf("settled on %q", got)
	}
	if _, err := Parse(got); err == nil {
		t.Fatal("the settled content is the invalid config, which must be rejected")
	}
}
