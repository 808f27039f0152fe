package networking

import (
	"strings"
	"testing"
	"time"
)

func FuzzParseResolvConf(f *testing.F) {
	f.Add([]byte("nameserver 10.0.0.2\nsearch ec2.internal\n"))
	f.Add([]byte("nameserver fd00:ec2::253 # v6\n;comment\nnameserver 127.0.0.53\nnameserver 1.1.1.1\nnameserver 8.8.8.8\n"))
	f.Add([]byte("nameserver\nnameserver fe80::1%eth0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := parseResolvConf(data)
		if len(got) > maxNameservers {
			t.Fatalf("%d nameservers", len(got))
		}
		for _, s := range got {
			if s == "" || strings.ContainsAny(s, " \t\n#;") {
				t.Fatalf("bad address %q", s)
			}
			if w := withPort(s); !strings.HasSuffix(w, ":53") {
				t.Fatalf("withPort(%q) = %q", s, w)
			}
		}
	})
}

func FuzzDNSWire(f *testing.F) {
	f.Add(uint16(1), ".", []byte{0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(0xbeef), "kubernetes.default.svc.cluster.local", []byte{0xbe, 0xef, 0x81, 0x83})
	f.Fuzz(func(t *testing.T, id uint16, name string, resp []byte) {
		q, err := buildQuery(id, name)
		if err == nil {
			if len(q) < dnsHeaderLen+5 || len(q) > dnsHeaderLen+255+4 {
				t.Fatalf("query of %d bytes for %q", len(q), name)
			}
			// A query is never mistaken for its own answer.
			if _, err := parseResponseHeader(q, id); err == nil {
				t.Fatal("query parsed as a response")
			}
		}
		rcode, err := parseResponseHeader(resp, id)
		if err == nil && (rcode < 0 || rcode > 15 || len(resp) < dnsHeaderLen) {
			t.Fatalf("rcode %d from %d bytes", rcode, len(resp))
		}
	})
}

func FuzzParseIPAMDLine(f *testing.F) {
	f.Add([]byte(`{"level":"error","ts":"2024-11-21T19:12:29.123Z","caller":"k8sapi/k8sutils.go:79","msg":"Unable to reach API Server, x"}`))
	f.Add([]byte(`{"level":"info","ts":1732216349.5,"msg":"Successful communication with the Cluster! Cluster Version is: v1.31"}`))
	f.Add([]byte(`Unable to reach API Server {"ts":`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ts, msg, ok := parseIPAMDLine(line)
		if !ok {
			return
		}
		if msg == "" {
			t.Fatal("ok without a message")
		}
		if !ts.IsZero() && (ts.Year() < 1970 || ts.After(time.Date(5200, 1, 1, 0, 0, 0, 0, time.UTC))) {
			t.Fatalf("implausible time %v", ts)
		}
		_ = evalIPAMDLog(ipamdLog{}, [][]byte{line})
	})
}
