package redact

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchCorpus is size bytes of what bundles carry: kubelet, containerd,
// kernel and JSON log lines with now and then a secret, or config text.
func benchCorpus(kind string, size int) []byte {
	rnd := rand.New(rand.NewPCG(1, 2))
	pods := []string{"coredns-5d78c9869d-abcde", "aws-node-x7k2p", "trainer-0", "ebs-csi-node-9zq4w"}
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		ts := fmt.Sprintf("Jun 12 10:%02d:%02d", i/60%60, i%60)
		switch kind {
		case "config":
			switch rnd.IntN(6) {
			case 0:
				fmt.Fprintf(&b, "  %s: %q\n", []string{"apiVersion", "kind", "clusterDNS", "maxPods", "cgroupDriver"}[rnd.IntN(5)], fmt.Sprint(rnd.IntN(1e6)))
			case 1:
				fmt.Fprintf(&b, "[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r%d.io\".auth]\n  username = \"robot\"\n  password = \"p%x\"\n", i, rnd.Uint64())
			case 2:
				fmt.Fprintf(&b, "Environment=\"KUBELET_EXTRA_ARGS=--node-labels=pool=%d --register-with-taints=x=y:NoSchedule\"\n", i)
			case 3:
				fmt.Fprintf(&b, "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwK\n")
			case 4:
				fmt.Fprintf(&b, "{\"name\":\"AWS_REGION\",\"value\":\"us-east-%d\"},{\"name\":\"API_TOKEN\",\"value\":\"%x\"}\n", i%3, rnd.Uint64())
			default:
				fmt.Fprintf(&b, "--authorization-mode=Webhook --tls-private-key-file=/var/lib/kubelet/pki/kubelet-%d.key --v=2\n", i)
			}
		default:
			switch rnd.IntN(6) {
			case 0:
				fmt.Fprintf(&b, "%s ip-10-0-1-23 kubelet[1034]: I0612 10:00:01.%06d 1034 kubelet.go:%d] \"SyncLoop (PLEG): event for pod\" pod=\"kube-system/%s\" event={\"ID\":\"%x\",\"Type\":\"ContainerStarted\"}\n",
					ts, rnd.IntN(1e6), 2000+rnd.IntN(500), pods[rnd.IntN(len(pods))], rnd.Uint64())
			case 1:
				fmt.Fprintf(&b, "%s ip-10-0-1-23 containerd[812]: time=\"2024-06-12T10:00:01.%09dZ\" level=info msg=\"StartContainer for \\\"%x%x\\\" returns successfully\"\n", ts, rnd.IntN(1e9), rnd.Uint64(), rnd.Uint64())
			case 2:
				fmt.Fprintf(&b, "%s ip-10-0-1-23 kernel: [%d.%06d] eni%x: renamed from tmp%x; IPv6: ADDRCONF(NETDEV_CHANGE): link becomes ready\n", ts, rnd.IntN(400000), rnd.IntN(1e6), rnd.Uint32(), rnd.Uint32())
			case 3:
				fmt.Fprintf(&b, "%s ip-10-0-1-23 kubelet[1034]: E0612 10:00:01.%06d 1034 pod_workers.go:1298] \"Error syncing pod, skipping\" err=\"failed to \\\"StartContainer\\\" for \\\"app\\\" with CrashLoopBackOff\" pod=\"default/%s\" podUID=\"%x\"\n", ts, rnd.IntN(1e6), pods[rnd.IntN(len(pods))], rnd.Uint64())
			case 4:
				fmt.Fprintf(&b, "%s ip-10-0-1-23 systemd[1]: Started cri-containerd-%x.scope - libcontainer container %x.\n", ts, rnd.Uint64(), rnd.Uint64())
			default:
				if rnd.IntN(200) == 0 {
					fmt.Fprintf(&b, "%s ip-10-0-1-23 app[99]: retrying with Authorization: Bearer planted%x\n", ts, rnd.Uint64())
				} else {
					fmt.Fprintf(&b, "%s ip-10-0-1-23 aws-node[2211]: {\"level\":\"debug\",\"ts\":\"2024-06-12T10:00:01.%03dZ\",\"caller\":\"ipamd/ipamd.go:%d\",\"msg\":\"IP pool stats: total=%d, used=%d\"}\n", ts, rnd.IntN(1000), 600+rnd.IntN(100), rnd.IntN(60), rnd.IntN(60))
				}
			}
		}
	}
	return []byte(b.String())
}

// BenchmarkWriter measures redaction throughput (MB/s) through a Writer,
// written in 64 KiB chunks as the collectors do.
func BenchmarkWriter(b *testing.B) {
	for _, kind := range []string{"logs", "config"} {
		data := benchCorpus(kind, 8<<20)
		b.Run(kind, func(b *testing.B) {
			r := New()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := r.NewWriter(discard{})
				for p := data; len(p) > 0; {
					n := min(64<<10, len(p))
					_, _ = w.Write(p[:n])
					p = p[n:]
				}
				_ = w.Close()
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
