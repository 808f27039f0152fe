package diagtest

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

// Untar reads a bundle (tar.gz) into a map from each file's path below the
// bundle's top directory to its content.
func Untar(t testing.TB, r io.Reader) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(h.Name, "/")
		out[rest] = string(b)
	}
}
