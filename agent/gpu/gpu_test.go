//go:build cgo

package gpu

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// go-nvml's H200 mock: eight GPUs with names, UUIDs, memory and PCI ids.
// Its NVLink queries panic unless given, so the test gives each GPU 18
// links, the last one down.
func TestDiscoverH200Mock(t *testing.T) {
	srv := dgxh200.New()
	for _, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case link >= 18:
				return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
			case link == 17:
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range dev.PciBusID {
				p.BusId[i] = int8(c)
			}
			return p, nvml.SUCCESS
		}
	}
	res := DiscoverWith(srv)
	if res.Reason != "" || len(res.GPUs) != 8 {
		t.Fatalf("reason %q, %d GPUs; want 8", res.Reason, len(res.GPUs))
	}
	g := res.GPUs[0]
	if !strings.Contains(g.Name, "H200") || g.UUID == "" || g.MemoryBytes < 100<<30 || g.PCIBusID == "" {
		t.Errorf("GPU 0 = %+v", g)
	}
	if len(g.NVLinks) != 18 || !g.NVLinks[0].Up || g.NVLinks[17].Up {
		t.Errorf("NVLinks %+v, want 18 with link 17 down", g.NVLinks)
	}
	if res.TotalMemory() != 8*g.MemoryBytes {
		t.Errorf("total memory %d", res.TotalMemory())
	}
}

// Without a driver, Init fails and nothing else may be called: a mock
// whose every other method panics proves discovery stops at Init.
func TestNoDriverCallsNothingAfterInit(t *testing.T) {
	lib := &mock.Interface{
		InitFunc:        func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
		ErrorStringFunc: func(r nvml.Return) string { return "library not found" },
	}
	res := DiscoverWith(lib)
	if res.Reason != "no NVIDIA driver" || len(res.GPUs) != 0 {
		t.Errorf("result %+v", res)
	}
	if len(lib.DeviceGetCountCalls()) != 0 || len(lib.ShutdownCalls()) != 0 {
		t.Error("discovery called NVML after a failed Init")
	}
}

// On this machine (no driver) the real library reports no driver and the
// process survives.
func TestDiscoverOnThisHost(t *testing.T) {
	res := Discover()
	if len(res.GPUs) == 0 && res.Reason == "" {
		t.Error("no GPUs and no reason")
	}
	t.Logf("this host: %d GPUs, %q", len(res.GPUs), res.Reason)
}
