//go:build !(nixl && cgo)

package transfer

import "errors"

// HaveNIXL reports whether this binary was built with the NIXL backend.
const HaveNIXL = false

// NewNIXL is unavailable in this build: the NIXL backend needs cgo and the
// nixl build tag (see agent/transfer/NIXL.md).
func NewNIXL(name string, kinds map[string]string) (Backend, error) {
	return nil, errors.New("transfer: the nixl backend is not in this binary: rebuild with -tags nixl (and cgo) on a host with NIXL installed (see agent/transfer/NIXL.md)")
}
