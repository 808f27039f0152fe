package childproc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ldCache is the dynamic loader's cache, /etc/ld.so.cache, written by
// ldconfig: which file the loader opens for a library name found in none
// of a program's own search paths.
type ldCache struct {
	paths map[string][]string // library name → files, in cache order
}

func (c *ldCache) lookup(name string) []string {
	if c == nil {
		return nil
	}
	return c.paths[name]
}

// The format of glibc's sysdeps/generic/dl-cache.h: the "new" format
// (glibc 2.32 and later write only it; older ones wrote it after an "old"
// format part, which is skipped). A header
//
//	magic "glibc-ld.so.cache" (17 bytes), version "1.1" (3),
//	nlibs uint32, len_strings uint32, flags uint8, 3 padding bytes,
//	extension_offset uint32, 3 unused uint32   (48 bytes in all)
//
// then nlibs entries of 24 bytes — flags int32, key uint32, value uint32,
// osversion uint32, hwcap uint64 — whose key (the library name) and value
// (its path) are offsets of NUL-terminated strings from the start of the
// header. Native byte order: the cache is the host's own.
const (
	ldCacheOldMagic = "ld.so-1.7.0"
	ldCacheMagic    = "glibc-ld.so.cache1.1"
	ldCacheHeader   = 48
	ldCacheEntry    = 24
	// maxLDCache bounds the file: real ones are tens to hundreds of KiB.
	maxLDCache = 64 << 20
)

// parseLDCache reads a cache; it never panics on a malformed one, and
// refuses it instead.
func parseLDCache(b []byte) (*ldCache, error) {
	if len(b) > maxLDCache {
		return nil, fmt.Errorf("is larger than %d bytes", maxLDCache)
	}
	start := 0
	if bytes.HasPrefix(b, []byte(ldCacheOldMagic)) {
		// The old part: magic, nlibs at 12 (aligned), 12-byte entries from
		// 16; the new part starts 8-aligned after them.
		if len(b) < 16 {
			return nil, errors.New("is truncated in its old-format header")
		}
		n := uint64(binary.NativeEndian.Uint32(b[12:]))
		end := 16 + n*12
		end = (end + 7) &^ 7
		if end > uint64(len(b)) {
			return nil, errors.New("is truncated in its old-format entries")
		}
		start = int(end)
	}
	h := b[start:]
	if !bytes.HasPrefix(h, []byte(ldCacheMagic)) {
		return nil, errors.New("is not a glibc ld.so.cache of format 1.1")
	}
	if len(h) < ldCacheHeader {
		return nil, errors.New("is truncated in its header")
	}
	n := uint64(binary.NativeEndian.Uint32(h[20:]))
	if uint64(ldCacheHeader)+n*ldCacheEntry > uint64(len(h)) {
		return nil, fmt.Errorf("is truncated: %d entries do not fit", n)
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(h)) {
			return "", fmt.Errorf("has a string offset %d past its end", off)
		}
		s := h[off:]
		i := bytes.IndexByte(s, 0)
		if i < 0 {
			return "", errors.New("has an unterminated string")
		}
		return string(s[:i]), nil
	}
	c := &ldCache{paths: make(map[string][]string, n)}
	for i := uint64(0); i < n; i++ {
		e := h[ldCacheHeader+i*ldCacheEntry:]
		key, err := str(binary.NativeEndian.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		value, err := str(binary.NativeEndian.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		c.paths[key] = append(c.paths[key], value)
	}
	return c, nil
}
