// Package gpu discovers the host's NVIDIA GPUs with go-nvml: name, UUID,
// memory, PCI bus id and the state of every NVLink.
//
// NVML is loaded at run time. Without a driver nvml.Init fails, and no
// other NVML function may then be called (the dynamic loader would kill the
// process); Discover reports "no NVIDIA driver" instead. NVML needs cgo:
// a build without cgo (CGO_ENABLED=0) compiles gpu_nocgo.go, which reports
// that GPU discovery needs cgo.
package gpu

import "github.com/kvscope/kvscope/core/event"

// Result is what discovery found.
type Result struct {
	GPUs []event.GPU
	// Reason says why there are no GPUs ("no NVIDIA driver"); "" when
	// discovery worked.
	Reason string
}

// TotalMemory is the memory of every GPU found, for sizing KV pools.
func (r Result) TotalMemory() uint64 {
	var n uint64
	for _, g := range r.GPUs {
		n += g.MemoryBytes
	}
	return n
}
