package networking

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"syscall"
	"time"
)

// maxBody bounds what a health probe reads of a response.
const maxBody = 64 << 10

// httpResult is what one health probe got.
type httpResult struct {
	Status int
	Body   []byte
}

// errNoListener means nothing listens at the address: the component is not
// installed here (or not running), which is not the same as "not ready".
var errNoListener = errors.New("nothing listens there")

// httpGet does one GET over a connection it dials itself, in the calling
// goroutine, so that inside netNS.run the socket belongs to the inspected
// namespace (net/http's Transport would dial from another goroutine, in the
// agent's namespace). network is "tcp" or "unix". A refused connection or a
// missing socket file returns errNoListener.
func httpGet(ctx context.Context, network, addr, path string, timeout time.Duration) (httpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
			return httpResult{}, fmt.Errorf("%s %s: %w", network, addr, errNoListener)
		}
		return httpResult{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+path, nil)
	if err != nil {
		return httpResult{}, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return httpResult{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return httpResult{}, err
	}
	return httpResult{Status: resp.StatusCode, Body: body}, nil
}
