package diagtest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"nodemend.dev/nodemend/internal/command"
)

// Secrets planted in the EKS host's files.
const (
	secretIPAMDLog   = "plantedIpamdSessionToken77"
	secretPodLog     = "plantedCorednsPassword31"
	secretNodeadmKey = "plantedNodeadmBootstrapToken9"
	secretActivation = "plantedSsmActivationCode5"
)

// EKS is what AddEKS put on the host: the ipamd endpoints it serves.
type EKS struct {
	// IPAMDIntrospection and IPAMDMetrics are loopback host:port of test
	// servers answering as ipamd does.
	IPAMDIntrospection, IPAMDMetrics string
}

// AddEKS makes h an EKS node running the Amazon VPC CNI (with its network
// policy agent), nodeadm (Amazon Linux 2023) and the add-ons the EKS node
// monitoring agent's bundle covers: every file category that agent and the
// EKS log collector script collect has a file here (their layouts and
// sample contents are those of aws/eks-node-monitoring-agent's
// docs/NodeDiagnostics and the VPC CNI's log formats). It also gives the
// node Cilium's and Calico's CNI logs, so one host covers the three CNIs
// nodemend knows. ipamd's introspection (61679) and metrics (61678)
// endpoints are test servers on loopback, closed at cleanup.
func (h *Host) AddEKS(t testing.TB) *EKS {
	t.Helper()
	r := h.Root
	h.Secrets = append(h.Secrets, secretIPAMDLog, secretPodLog, secretNodeadmKey, secretActivation)

	// var_log: the VPC CNI's logs.
	r.WriteFile("var/log/aws-routed-eni/ipamd.log",
		`{"level":"info","ts":"2024-06-12T10:00:00.123Z","caller":"ipamd/ipamd.go:421","msg":"Starting L-IPAMD v1.18.2  ..."}`+"\n"+
			`{"level":"info","ts":"2024-06-12T10:00:01.456Z","caller":"ipamd/ipamd.go:812","msg":"Added ENI(eni-0a1b2c3d4e5f67890)'s IP/Prefix 10.0.1.45/32 to datastore"}`+"\n"+
			`{"level":"debug","ts":"2024-06-12T10:00:02.000Z","caller":"awsutils/awsutils.go:410","msg":"aws session","X-Amz-Security-Token":"`+secretIPAMDLog+`"}`+"\n")
	r.WriteFile("var/log/aws-routed-eni/plugin.log",
		`{"level":"info","ts":"2024-06-12T10:00:20.001Z","caller":"routed-eni-cni-plugin/cni.go:125","msg":"Received CNI add request: ContainerID(6f1e0b2a) Netns(/var/run/netns/cni-1234) IfName(eth0) Args(K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde)"}`+"\n")
	r.WriteFile("var/log/aws-routed-eni/network-policy-agent.log",
		`{"level":"info","ts":"2024-06-12T10:00:03.000Z","logger":"setup","msg":"Network Policy Agent started"}`+"\n")
	r.WriteFile("var/log/aws-routed-eni/ebpf-sdk.log", `{"level":"info","ts":"2024-06-12T10:00:03.100Z","msg":"Loaded BPF program tc_ingress"}`+"\n")
	r.WriteFile("var/log/aws-routed-eni/egress-v6-plugin.log", `{"level":"info","ts":"2024-06-12T10:00:21.000Z","msg":"Received add request for egress-v6 plugin"}`+"\n")
	r.WriteFile("var/run/aws-node/ipam.json",
		`{"version":"vpc-cni-ipam/1","allocations":[{"containerID":"6f1e0b2a","ipv4":"10.0.1.45","metadata":{"k8sPodNamespace":"kube-system","k8sPodName":"coredns-5d78c9869d-abcde","interfaceName":"eth0"}}]}`+"\n")
	r.WriteFile("etc/cni/net.d/10-aws.conflist",
		`{"cniVersion":"1.0.0","name":"aws-cni","disableCheck":true,"plugins":[{"name":"aws-cni","type":"aws-cni","vethPrefix":"eni","mtu":"9001","pluginLogFile":"/var/log/aws-routed-eni/plugin.log","pluginLogLevel":"DEBUG"},{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`+"\n")

	// Cilium's and Calico's CNI logs.
	r.WriteFile("var/run/cilium/cilium-cni.log", `level=info msg="Processing CNI ADD request" containerID=6f1e0b2a subsys=cilium-cni`+"\n")
	r.WriteFile("var/log/calico/cni/cni.log", `2024-06-12 10:00:20.001 [INFO][2345] plugin.go 326: Calico CNI found existing endpoint`+"\n")
	r.WriteFile("var/log/calico/felix/current", `2024-06-12 10:00:00.000 [INFO][51] felix/daemon.go 400: Felix starting up`+"\n")

	// The system pods' logs (CRI log format).
	r.WriteFile("var/log/pods/kube-system_aws-node-z8qk6_892ff6b4-95ee-409c-87ea-c97686b644fe/aws-node/0.log",
		`2024-06-12T10:00:00.123456789Z stdout F {"level":"info","msg":"Successfully copied CNI plugin binary and config file."}`+"\n")
	r.WriteFile("var/log/pods/kube-system_aws-node-z8qk6_892ff6b4-95ee-409c-87ea-c97686b644fe/aws-network-policy-agent/0.log",
		`2024-06-12T10:00:00.223456789Z stdout F {"level":"info","msg":"Network Policy Agent started"}`+"\n")
	r.WriteFile("var/log/pods/kube-system_coredns-5d78c9869d-abcde_00aae29f-98c1-4e52-a24f-4a32cd5da5da/coredns/0.log",
		`2024-06-12T10:00:20.123456789Z stdout F [INFO] plugin/reload: Running configuration SHA512 = 0f3a`+"\n"+
			`2024-06-12T10:00:20.223456789Z stderr F [ERROR] plugin/forward: upstream auth password=`+secretPodLog+"\n")
	r.WriteFile("var/log/pods/kube-system_kube-proxy-7xkq2_11bbe29f-98c1-4e52-a24f-4a32cd5da5db/kube-proxy/0.log",
		`2024-06-12T10:00:05.000000000Z stderr F I0612 10:00:05.000000       1 server_linux.go:66] "Using iptables proxy"`+"\n")
	r.WriteFile("var/log/pods/kube-system_ebs-csi-node-4mz8p_22cce29f-98c1-4e52-a24f-4a32cd5da5dc/ebs-plugin/0.log",
		`2024-06-12T10:00:06.000000000Z stderr F I0612 10:00:06.000000       1 driver.go:84] "Driver Information" Driver="ebs.csi.aws.com"`+"\n")
	r.WriteFile("var/log/pods/kube-system_eks-pod-identity-agent-9q8w7_33dde29f-98c1-4e52-a24f-4a32cd5da5dd/eks-pod-identity-agent/0.log",
		`2024-06-12T10:00:07.000000000Z stdout F {"level":"info","msg":"Starting server"}`+"\n")
	// A pod not in the list stays out.
	r.WriteFile("var/log/pods/default_web-0_44eee29f-98c1-4e52-a24f-4a32cd5da5de/web/0.log", "2024-06-12T10:00:08.000000000Z stdout F private\n")

	// var_log: cloud-init, user data, cron, kube-proxy.
	r.WriteFile("var/log/cloud-init.log", "2024-06-12 09:59:01,000 - util.py[DEBUG]: Cloud-init v. 22.2.2 running 'init'\n")
	r.WriteFile("var/log/cloud-init-output.log", "Cloud-init v. 22.2.2 finished at Wed, 12 Jun 2024 09:59:30 +0000. Datasource DataSourceEc2.\n")
	r.WriteFile("var/log/user-data.log", "+ /etc/eks/bootstrap.sh my-cluster\n")
	r.WriteFile("var/log/cron", "Jun 12 10:01:01 ip-10-0-1-23 CROND[4242]: (root) CMD (run-parts /etc/cron.hourly)\n")
	r.WriteFile("var/log/kube-proxy.log", "I0612 10:00:05.000000       1 server_linux.go:66] Using iptables proxy\n")
	r.WriteFile("var/lib/cloud/data/instance-id", "i-1234567890abcdef0\n")

	// nodeadm (Amazon Linux 2023): its units, NodeConfig and the kubelet
	// drop-ins it writes.
	for _, u := range []string{"nodeadm-config", "nodeadm-run", "sandbox-image", "configure-multicard-interfaces"} {
		r.WriteFile("usr/lib/systemd/system/"+u+".service", "[Unit]\nDescription="+u+"\n[Service]\nType=oneshot\nExecStart=/usr/bin/true\n")
	}
	r.WriteFile("etc/eks/nodeadm.d/00-nodeconfig.yaml", "---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: my-cluster\n"+
		"    apiServerEndpoint: https://ABCDEF0123456789.gr7.us-east-1.eks.amazonaws.com\n    cidr: 10.100.0.0/16\n  kubelet:\n    flags:\n    - --node-labels=team=ml\n"+
		"    config:\n      maxPods: 110\n  bootstrapToken: "+secretNodeadmKey+"\n")
	// A hybrid node's NodeConfig carries an SSM activation.
	r.WriteFile("etc/eks/nodeadm-config.yaml", "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: my-cluster\n    region: us-east-1\n"+
		"  hybrid:\n    ssm:\n      activationCode: "+secretActivation+"\n      activationId: 0a1b2c3d-1111-2222-3333-444455556666\n")
	r.WriteFile("etc/kubernetes/kubelet/config.json", `{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","maxPods":110,"clusterDNS":["10.100.0.10"]}`+"\n")
	r.WriteFile("etc/kubernetes/kubelet/config.json.d/00-nodeadm.conf", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":110}`+"\n")
	h.Script.
		Set("journalctl * --unit=nodeadm-config.service", command.Result{Stdout: `2024-06-12T09:59:10.000000+0000 ip-10-0-1-23 nodeadm[1201]: {"level":"info","ts":1718186350.0,"caller":"init/init.go:49","msg":"Checking user is root.."}` + "\n"}).
		Set("journalctl * --unit=nodeadm-run.service", command.Result{Stdout: `2024-06-12T09:59:40.000000+0000 ip-10-0-1-23 nodeadm[1302]: {"level":"info","ts":1718186380.0,"caller":"init/init.go:120","msg":"done!"}` + "\n"}).
		Set("journalctl * --unit=sandbox-image.service", command.Result{Stdout: "2024-06-12T09:59:20.000000+0000 ip-10-0-1-23 sandbox-image[1250]: Pulling sandbox image\n"}).
		Set("journalctl * --unit=configure-multicard-interfaces.service", command.Result{Stdout: "-- No entries --\n"})

	// ipamd's introspection and metrics endpoints.
	intro := http.NewServeMux()
	for ep, body := range map[string]string{
		"enis":                      `{"TotalIPs":14,"AssignedIPs":5,"ENIs":{"eni-0a1b2c3d4e5f67890":{"ID":"eni-0a1b2c3d4e5f67890","IsPrimary":true,"DeviceNumber":0}}}`,
		"pods":                      `{"kube-system/coredns-5d78c9869d-abcde":{"IPv4Addr":"10.0.1.45","DeviceNumber":0}}`,
		"networkutils-env-settings": `{"AWS_VPC_K8S_CNI_EXTERNALSNAT":"false","AWS_VPC_ENI_MTU":"9001"}`,
		"ipamd-env-settings":        `{"WARM_ENI_TARGET":"1","ENABLE_PREFIX_DELEGATION":"false"}`,
		"eni-configs":               `{}`,
	} {
		intro.HandleFunc("/v1/"+ep, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body + "\n")) })
	}
	introSrv := httptest.NewServer(intro)
	metricsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("# HELP awscni_assigned_ip_addresses The number of IP addresses assigned to pods\n# TYPE awscni_assigned_ip_addresses gauge\nawscni_assigned_ip_addresses 5\n"))
	}))
	t.Cleanup(introSrv.Close)
	t.Cleanup(metricsSrv.Close)
	return &EKS{IPAMDIntrospection: hostPort(introSrv.URL), IPAMDMetrics: hostPort(metricsSrv.URL)}
}

// hostPort is the host:port of a test server's URL.
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err) // httptest's own URL
	}
	return u.Host
}
