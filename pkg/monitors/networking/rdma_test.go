package networking

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
)

// efaDevice writes an EFA device's sysfs as the efa driver exposes it
// (PCI vendor 0x1d0f, device 0xefa1; port 1's hw_counters as in
// efa_verbs.c efa_port_stats_descs, the device's in efa_device_stats_descs).
func efaDevice(r *hostroot.Root, name string, c map[string]uint64) {
	base := infinibandDir + "/" + name
	r.WriteFile(base+"/device/vendor", "0x1d0f\n")
	r.WriteFile(base+"/device/device", "0xefa1\n")
	r.WriteFile(base+"/node_type", "6: unspecified\n")
	r.WriteFile(base+"/ports/1/link_layer", "Unspecified\n")
	r.WriteFile(base+"/hw_counters/submitted_cmds", "4213\n")
	r.WriteFile(base+"/hw_counters/cmds_err", "0\n")
	for _, n := range []string{"tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs",
		"rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes", "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err",
		"rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events"} {
		r.WriteFile(fmt.Sprintf("%s/ports/1/hw_counters/%s", base, n), fmt.Sprintf("%d\n", c[n]))
	}
}

// mlx5Device writes an mlx5 device with its InfiniBand port counters
// (counters/, the PMA) and driver counters (hw_counters/, mlx5 counters.c);
// linkLayer is InfiniBand or Ethernet (RoCE).
func mlx5Device(r *hostroot.Root, name, linkLayer string, c map[string]uint64) {
	base := infinibandDir + "/" + name
	r.WriteFile(base+"/device/vendor", "0x15b3\n")
	r.WriteFile(base+"/device/device", "0x101b\n")
	r.WriteFile(base+"/ports/1/link_layer", linkLayer+"\n")
	for _, n := range []string{"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_rcv_remote_physical_errors",
		"port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors", "local_link_integrity_errors",
		"excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data", "port_xmit_wait"} {
		r.WriteFile(fmt.Sprintf("%s/ports/1/counters/%s", base, n), fmt.Sprintf("%d\n", c[n]))
	}
	for _, n := range []string{"out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err",
		"local_ack_timeout_err", "req_cqe_error", "resp_cqe_error", "np_cnp_sent", "rp_cnp_handled", "roce_adp_retrans"} {
		r.WriteFile(fmt.Sprintf("%s/ports/1/hw_counters/%s", base, n), fmt.Sprintf("%d\n", c[n]))
	}
}

func TestRDMACounters(t *testing.T) {
	root := hostroot.New(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{})
	check := monitortest.Stepper(t, m, "net-rdma-counters", clk, time.Minute)

	check("") // no RDMA device: nothing to read
	efa := map[string]uint64{"rx_pkts": 1 << 30, "rdma_read_wr_err": 12, "retrans_pkts": 4000}
	ib := map[string]uint64{"symbol_error": 3, "port_xmit_data": 1 << 40}
	roce := map[string]uint64{"out_of_sequence": 7, "np_cnp_sent": 900000}
	efaDevice(root, "rdmap16s27", efa)
	mlx5Device(root, "mlx5_0", "InfiniBand", ib)
	mlx5Device(root, "mlx5_1", "Ethernet", roce)
	check("") // the baseline

	// Traffic, congestion notifications and a slow creep of errors are not faults.
	efa["rx_pkts"] += 90_000_000
	efa["rdma_read_wr_err"] += 40
	efa["retrans_pkts"] += 20_000
	ib["port_xmit_data"] += 1 << 35
	ib["symbol_error"] += 2
	roce["np_cnp_sent"] += 5_000_000
	efaDevice(root, "rdmap16s27", efa)
	mlx5Device(root, "mlx5_0", "InfiniBand", ib)
	mlx5Device(root, "mlx5_1", "Ethernet", roce)
	check("")

	// A burst on each device.
	efa["rdma_read_wr_err"] += 900
	efa["unresponsive_remote_events"] += 400
	ib["link_downed"]++
	roce["local_ack_timeout_err"] += 250
	efaDevice(root, "rdmap16s27", efa)
	mlx5Device(root, "mlx5_0", "InfiniBand", ib)
	mlx5Device(root, "mlx5_1", "Ethernet", roce)
	check("EFAErrorMetric/mlx5_0/1,EFAErrorMetric/mlx5_1/1,EFAErrorMetric/rdmap16s27/1")
	fs, _ := runCheck(t, m, "net-rdma-counters")
	if len(fs) != 0 {
		t.Fatalf("no new errors: %v", fs)
	}

	// Rates are per minute: the same burst over ten minutes is within
	// the allowance.
	clk.SetTime(clk.Now().Add(10 * time.Minute))
	efa["rdma_read_wr_err"] += 900
	efaDevice(root, "rdmap16s27", efa)
	check("")

	// A driver reload resets the counters: a new baseline, not a fault.
	efaDevice(root, "rdmap16s27", map[string]uint64{"rdma_read_wr_err": 1})
	check("")
}

func TestRDMAFindingMessage(t *testing.T) {
	r := rdmaReading{Devices: map[string]rdmaDevice{"rdmap16s27": {Kind: "EFA"}}, Counters: []rdmaCounter{{"rdmap16s27", "1", "rdma_write_wr_err", 10}}}
	st, _ := evalRDMA(rdmaState{}, r, t0)
	r.Counters[0].Value = 1010
	_, fs := evalRDMA(st, r, t0.Add(30*time.Second))
	if len(fs) != 1 || !strings.Contains(fs[0].Message, "EFA device rdmap16s27 port 1: error counters rise fast since the last check 30s ago: rdma_write_wr_err +1000 (2000/min, allowance 160/min)") {
		t.Fatalf("%v", fs)
	}
}
