package sim

import "fmt"

// NodePool is a Karpenter NodePool of the simulation: nodes of one kwok
// instance type, labelled with labels (GPULabel gives their hosts GPUs),
// never consolidated or expired, so that only nodemend removes them.
func NodePool(name, instanceType string, labels map[string]string) string {
	return NodePoolInZone(name, instanceType, "", labels)
}

// NodePoolInZone is NodePool with its nodes in zone (one of Options.Zones;
// empty: any the provider offers).
func NodePoolInZone(name, instanceType, zone string, labels map[string]string) string {
	l := ""
	for k, v := range labels {
		l += fmt.Sprintf("\n        %s: %q", k, v)
	}
	z := ""
	if zone != "" {
		z = fmt.Sprintf("\n      - {key: topology.kubernetes.io/zone, operator: In, values: [%s]}", zone)
	}
	return fmt.Sprintf(`apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: %[1]s
spec:
  template:
    metadata:
      labels:
        sim.nodemend.dev/pool: %[1]s%[3]s
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: %[4]s}
      expireAfter: Never
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [%[2]s]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}%[5]s
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
`, name, instanceType, l, NodeClassName, z)
}

// Workload is a Deployment of replicas pods, one per node of pool (required
// anti-affinity on the hostname), each requesting cpu, with a
// PodDisruptionBudget that allows maxUnavailable of them to be disrupted.
func Workload(namespace, name, pool string, replicas int, cpu string, maxUnavailable int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  replicas: %[4]d
  selector:
    matchLabels: {app: %[2]s}
  template:
    metadata:
      labels: {app: %[2]s}
    spec:
      nodeSelector: {karpenter.sh/nodepool: %[3]s}
      terminationGracePeriodSeconds: 5
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {app: %[2]s}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: app
        image: registry.example/trainer:1.0
        resources:
          requests: {cpu: %[5]q, memory: 1Gi}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  maxUnavailable: %[6]d
  selector:
    matchLabels: {app: %[2]s}
`, namespace, name, pool, replicas, cpu, maxUnavailable)
}

// RepairPolicy is a NodeRepairPolicy for the nodes labelled key=value:
// repair when condition is False for toleration, drain with a deadline,
// gate at maxUnhealthy.
func RepairPolicy(name, key, value, condition, toleration, drainDeadline, maxUnhealthy string) string {
	return fmt.Sprintf(`apiVersion: nodemend.dev/v1alpha1
kind: NodeRepairPolicy
metadata:
  name: %[1]s
spec:
  nodeSelector:
    matchLabels: {%[2]s: %[3]q}
  weight: 100
  maxUnhealthy: %[7]q
  rules:
  - {conditionType: %[4]s, status: "False", toleration: %[5]s}
  drain:
    mode: Evict
    deadline: %[6]s
  action: Replace
`, name, key, value, condition, toleration, drainDeadline, maxUnhealthy)
}
