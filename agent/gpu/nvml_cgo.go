//go:build cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/kvscope/kvscope/core/event"
)

// Discover inventories the GPUs through the system's NVML.
func Discover() Result { return DiscoverWith(nvml.New()) }

// DiscoverWith inventories the GPUs through an NVML implementation (the
// real library, or go-nvml's mocks in tests). Every call after Init is
// made only when Init succeeded.
func DiscoverWith(lib nvml.Interface) Result {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND || ret == nvml.ERROR_DRIVER_NOT_LOADED {
			return Result{Reason: "no NVIDIA driver"}
		}
		return Result{Reason: fmt.Sprintf("NVML failed to initialise: %s", lib.ErrorString(ret))}
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Result{Reason: fmt.Sprintf("NVML could not count devices: %s", lib.ErrorString(ret))}
	}
	res := Result{GPUs: []event.GPU{}}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := event.GPU{Index: i, NVLinks: []event.NVLink{}}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.Name = name
		}
		if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = uuid
		}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = mem.Total
		}
		if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
			g.PCIBusID = busID(pci.BusId)
		}
		for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
			state, ret := dev.GetNvLinkState(link)
			if ret != nvml.SUCCESS {
				continue // NOT_SUPPORTED: no such link
			}
			g.NVLinks = append(g.NVLinks, event.NVLink{Link: link, Up: state == nvml.FEATURE_ENABLED})
		}
		res.GPUs = append(res.GPUs, g)
	}
	if len(res.GPUs) == 0 {
		res.Reason = "NVML found no GPUs"
	}
	return res
}

// busID reads NVML's NUL-terminated bus id.
func busID(b [32]int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
