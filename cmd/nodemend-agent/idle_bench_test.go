package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// BenchmarkIdleAgent runs the real nodemend-agent binary for a minute
// (NODEMEND_IDLE_SECONDS overrides) on a healthy fake host against a real API
// server and reports its CPU use (% of one core) and resident memory.
// Targets: CPU ≤ 0.2%, RSS ≤ 30 MiB.
func BenchmarkIdleAgent(b *testing.B) {
	seconds := 60
	if s, err := strconv.Atoi(os.Getenv("NODEMEND_IDLE_SECONDS")); err == nil && s > 0 {
		seconds = s
	}
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	dir := b.TempDir()
	bin := filepath.Join(dir, "nodemend-agent")
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(b, env, kubeconfig)
	root := hostroot.New(b).WithProc()
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("agent.yaml", "sources:\n  journal:\n    mode: file\n    file: /"+hostroot.JournalFixture+"\n")
	if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "idle"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}

	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--node-name", "idle", "--host-root", root.Path(""),
			"--config", root.Path("agent.yaml"), "--metrics-bind-address", "")
		cmd.Stderr = os.Stderr
		cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("NODEMEND_IDLE_ENV"))...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Measure the steady state, not start-up.
		time.Sleep(5 * time.Second)
		cpu0 := cpuTicks(b, cmd.Process.Pid)
		start := time.Now()
		time.Sleep(time.Duration(seconds) * time.Second)
		cpu1 := cpuTicks(b, cmd.Process.Pid)
		elapsed := time.Since(start)
		rss, hwm := memKiB(b, cmd.Process.Pid, "VmRSS:"), memKiB(b, cmd.Process.Pid, "VmHWM:")
		// RssAnon is the agent's own memory; RssFile is mostly the binary's
		// text, clean pages the kernel shares and can drop.
		anon, file := memKiB(b, cmd.Process.Pid, "RssAnon:"), memKiB(b, cmd.Process.Pid, "RssFile:")
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		const ticksPerSecond = 100 // USER_HZ
		cpuPct := float64(cpu1-cpu0) / ticksPerSecond / elapsed.Seconds() * 100
		b.ReportMetric(cpuPct, "cpu-%")
		b.ReportMetric(float64(rss)/1024, "rss-MiB")
		b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
		b.ReportMetric(float64(anon)/1024, "anon-MiB")
		b.ReportMetric(float64(file)/1024, "file-MiB")
	}
}

func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

func memKiB(b *testing.B, pid int, key string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key) {
			v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return v
		}
	}
	return 0
}

func writeKubeconfig(b *testing.B, env *testenv.Env, path string) {
	c := env.Config
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData, Token: c.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		b.Fatal(err)
	}
}
