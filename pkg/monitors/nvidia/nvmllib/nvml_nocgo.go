//go:build !(linux && cgo)

package nvmllib

import (
	"fmt"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// Available reports whether this binary can load NVML at all.
const Available = false

// Open always fails: this binary was built without cgo (or not for Linux),
// and go-nvml cannot load libnvidia-ml without it.
func Open(string) (nvidia.Driver, error) {
	return nil, fmt.Errorf("%w: this nodemend-agent was built without cgo; kernel XIDs and device nodes are still watched", nvidia.ErrNoDriver)
}
