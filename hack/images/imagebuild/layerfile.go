package imagebuild

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerInfo is the descriptor of a layer file, kept beside it (FILE.json)
// so that assembling an image from cached layers reads no layer data:
// computing a diff ID means decompressing the whole layer.
type layerInfo struct {
	Digest, DiffID v1.Hash
	Size           int64
}

// WriteLayerFile normalizes entries into a gzip-compressed layer at path,
// with its descriptor beside it; OpenLayer reads both.
func WriteLayerFile(path string, entries []Entry, epoch time.Time) error {
	raw, gz, err := layerBytes(entries, epoch)
	if err != nil {
		return err
	}
	info := layerInfo{Digest: sha256Hash(gz), DiffID: sha256Hash(raw), Size: int64(len(gz))}
	meta, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, gz, 0o644); err != nil {
		return err
	}
	return os.WriteFile(path+".json", meta, 0o644)
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// OpenLayer returns the layer WriteLayerFile wrote at path, as an OCI
// layer.
func OpenLayer(path string) (v1.Layer, error) {
	meta, err := os.ReadFile(path + ".json")
	if err != nil {
		return nil, fmt.Errorf("layer descriptor: %w", err)
	}
	var info layerInfo
	if err := json.Unmarshal(meta, &info); err != nil {
		return nil, fmt.Errorf("layer descriptor %s.json: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() != info.Size {
		return nil, fmt.Errorf("layer %s is %d bytes, its descriptor says %d", path, st.Size(), info.Size)
	}
	return fileLayer{path: path, info: info}, nil
}

// fileLayer is a v1.Layer over a compressed layer file and its descriptor.
type fileLayer struct {
	path string
	info layerInfo
}

func (l fileLayer) Digest() (v1.Hash, error)             { return l.info.Digest, nil }
func (l fileLayer) DiffID() (v1.Hash, error)             { return l.info.DiffID, nil }
func (l fileLayer) Size() (int64, error)                 { return l.info.Size, nil }
func (l fileLayer) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }
func (l fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l fileLayer) Uncompressed() (io.ReadCloser, error) { return gunzipFile(l.path) }

// gunzipFile opens a gzip file for reading its content; closing the
// reader closes the file.
func gunzipFile(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, closers{zr, f}}, nil
}

type closers []io.Closer

func (c closers) Close() error {
	var first error
	for _, cl := range c {
		if err := cl.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadLayerFile reads the entries of a compressed layer file.
func ReadLayerFile(path string) ([]Entry, error) {
	rc, err := gunzipFile(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return ReadTar(bytes.NewReader(data))
}
