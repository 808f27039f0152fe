// Package nvmllib is the real NVML behind nvidia.Driver, through
// github.com/NVIDIA/go-nvml. go-nvml needs cgo and dlopens libnvidia-ml.so.1
// at run time: the agent binary is built with CGO_ENABLED=1 and runs
// unchanged on nodes without the NVIDIA driver, where Open fails with
// nvidia.ErrNoDriver and the nvidia monitor does not apply (unless /dev/nvidiaN
// exist, in which case it runs on the kernel log and device nodes alone).
// A CGO_ENABLED=0 build compiles the stub in nvml_nocgo.go, whose Open always
// reports ErrNoDriver.
//
// This is the only package that imports go-nvml; everything it returns is
// plain data decoded by package nvidia's pure functions.
package nvmllib
