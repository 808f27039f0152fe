package realnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// identity is one certificate the node's components present.
type identity struct {
	file string // base name under pki/: <file>.crt, <file>.key
	cn   string
	orgs []string
	// server certificates carry SANs; the rest are client certificates.
	server bool
	dns    []string
	ips    []net.IP
}

// identities are every certificate of the node: each component with its
// own name, as a kubeadm cluster has them, so the Node authorizer, RBAC
// and NodeRestriction see the identities they expect.
func (l Layout) identities() []identity {
	return []identity{
		{file: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: []net.IP{net.IP(l.NodeIP.AsSlice()), net.IP(l.KubernetesServiceIP().AsSlice()), net.IPv4(127, 0, 0, 1)}},
		// The API server's identity towards the kubelet (logs, exec, the
		// node proxy): bound to system:kubelet-api-admin at start.
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client"},
		{file: "admin", cn: "nodemend-node-admin", orgs: []string{"system:masters"}},
		{file: "controller-manager", cn: "system:kube-controller-manager"},
		{file: "scheduler", cn: "system:kube-scheduler"},
		{file: "kube-proxy", cn: "system:kube-proxy"},
		// The kubelet's own client certificate: the Node authorizer and
		// NodeRestriction confine it to this node.
		{file: "kubelet", cn: "system:node:" + l.NodeName, orgs: []string{"system:nodes"}},
		// The kubelet's serving certificate, verified by the API server
		// (--kubelet-certificate-authority) when it proxies to /logs/.
		{file: "kubelet-serving", cn: "system:node:" + l.NodeName, orgs: []string{"system:nodes"}, server: true,
			dns: []string{l.NodeName}, ips: []net.IP{net.IP(l.NodeIP.AsSlice())}},
	}
}

// writePKI creates the node's CA, every identity's key and certificate,
// and the service-account signing key, under State/pki (keys 0600).
func (l Layout) writePKI(now time.Time) error {
	if err := os.MkdirAll(filepath.Dir(l.pki("x")), 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "nodemend-node-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(l.pki("ca"), caDER, caKey); err != nil {
		return err
	}
	for _, id := range l.identities() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: id.cn, Organization: id.orgs},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if id.server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.DNSNames, tmpl.IPAddresses = id.dns, id.ips
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("certificate %s: %w", id.file, err)
		}
		if err := writePair(l.pki(id.file), der, key); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	return writeKeyPair(l.pki("sa"), saKey)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func writePair(base string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// writeKeyPair writes a signing key and its public half (.key, .pub).
func writeKeyPair(base string, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	pb, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(base+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pb}), 0o644)
}
