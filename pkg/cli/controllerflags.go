package cli

import (
	"github.com/spf13/pflag"
)

// controllerFlags locate the nodemend controller's settings that status and
// explain need to decide as it does. The defaults are the controller's.
type controllerFlags struct {
	namespace      string
	pauseConfigMap string
	agentConfig    string
	poolLabel      string
}

func (c *controllerFlags) bind(fl *pflag.FlagSet) {
	// Not --namespace: that is kubectl's -n, bound by the root.
	fl.StringVar(&c.namespace, "controller-namespace", "nodemend-system", "namespace of nodemend-controller (its --namespace), where the pause ConfigMap and the agents' ConfigMap live")
	fl.StringVar(&c.pauseConfigMap, "pause-configmap", "nodemend-pause", "name of the pause ConfigMap (the controller's --pause-configmap)")
	fl.StringVar(&c.agentConfig, "agent-config", "nodemend-agent-config", "name of the agents' ConfigMap (the controller's --agent-config), whose quiet periods policies are judged against")
	fl.StringVar(&c.poolLabel, "pool-label", "", "node label that defines pools (the controller's --pool-label)")
}
