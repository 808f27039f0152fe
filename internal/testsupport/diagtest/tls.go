package diagtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/netnstest"
)

// TLSServer is an HTTPS server on a test host of its own (a network
// namespace joined by a veth pair: internal/testsupport/netnstest) with a certificate for
// that address; Pool trusts it. Loopback will not do: the API server refuses
// to proxy to loopback node addresses, and NodeDiagnostic admission refuses
// loopback upload URLs.
type TLSServer struct {
	*httptest.Server
	Pool *x509.CertPool
	IP   net.IP
}

// NewTLSServer starts h on a new test host (any port) over TLS. It is
// closed at cleanup.
func NewTLSServer(t testing.TB, h http.Handler) *TLSServer {
	t.Helper()
	host := netnstest.NewHost(t)
	ip := host.IP
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodemend-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ln := host.Listen(t)
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = ln
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &TLSServer{Server: s, Pool: pool, IP: ip}
}
