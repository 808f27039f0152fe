// Command nodemend-test-workload is the application container of the
// real-node test tier: a small HTTP server that a Deployment, a PDB and a
// drain can act on. It serves /healthz (200 until it is told to stop) and
// / (who it runs as, on which node), and exits 0 on SIGTERM after
// --shutdown-delay, as a well-behaved workload does when the kubelet stops
// it. --identity prints the user it runs as and exits, to check an image's
// USER without a shell in the image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve /healthz and / on")
	shutdownDelay := flag.Duration("shutdown-delay", 0, "time between SIGTERM and exiting, /healthz answering 503 meanwhile")
	identity := flag.Bool("identity", false, "print uid, gid and host name, and exit")
	flag.Parse()
	if *identity {
		fmt.Println(describe())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err == nil {
		err = serve(ctx, ln, *shutdownDelay, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodemend-test-workload:", err)
		os.Exit(1)
	}
}

func describe() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("uid=%d gid=%d host=%s node=%s", os.Getuid(), os.Getgid(), host, os.Getenv("NODE_NAME"))
}

// serve answers on ln until ctx ends (a stop signal), then reports
// unhealthy for shutdownDelay and shuts the server down.
func serve(ctx context.Context, ln net.Listener, shutdownDelay time.Duration, log io.Writer) error {
	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, describe()) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(log, "serving on %s as %s\n", ln.Addr(), describe())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopping.Store(true)
	fmt.Fprintf(log, "got a stop signal; exiting in %s\n", shutdownDelay)
	time.Sleep(shutdownDelay)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
