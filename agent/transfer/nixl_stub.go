//go:build !(nixl && cgo)

package transfer

import (
	"errors"

	"github.com/kvscope/kvscope/core/xfer"
)

var errNoNIXL = errors.New("transfer: the nixl backend is not in this binary: rebuild with -tags nixl (and cgo) on a host with NIXL installed (see agent/transfer/NIXL.md)")

// HaveNIXL reports whether this binary was built with the NIXL backend.
const HaveNIXL = false

// NewNIXL is unavailable in this build: the NIXL backend needs cgo and the
// nixl build tag (see agent/transfer/NIXL.md).
func NewNIXL(name string, kinds map[string]string) (Backend, error) { return nil, errNoNIXL }

// NewNIXLSide is unavailable in this build (see NewNIXL).
func NewNIXLSide(name string, side xfer.Side, kinds map[string]string) (NIXLSide, error) {
	return nil, errNoNIXL
}

// NewNIXLRemote is unavailable in this build (see NewNIXL).
func NewNIXLRemote(name, addr, token string, kinds map[string]string) (Backend, error) {
	return nil, errNoNIXL
}
