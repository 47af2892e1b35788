//go:build nixl && cgo

package transfer

import (
	"testing"

	"github.com/kvscope/kvscope/core/xfer"
)

// TestNIXLRefusalsNameTheDescriptor: the nixl backend (both agents in
// this process) refuses each descriptor outside its regions before NIXL
// sees it, with the host backend's words.
func TestNIXLRefusalsNameTheDescriptor(t *testing.T) {
	n, err := newNIXL("kvscope-refusals", nil, xfer.P, xfer.D)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p, d := refusalRegs()
	if err := n.Register([]*xfer.Registration{p, d}); err != nil {
		t.Fatal(err)
	}
	md, err := n.Metadata()
	if err == nil {
		err = n.LoadRemote(md)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkRefusals(t, n)
}
