//go:build !(nixl && cgo)

package transfer

import "errors"

// HaveNIXL reports whether this binary was built with the NIXL backend.
const HaveNIXL = false

// NewNIXL is unavailable in this build.
func NewNIXL(agent string, kinds map[string]string) (Backend, error) {
	return nil, errors.New("transfer: the nixl backend is not in this binary: rebuild with -tags nixl (and cgo) on a host with NIXL installed")
}
