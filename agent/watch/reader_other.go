//go:build !linux

package watch

import "errors"

var errLinuxOnly = errors.New("watch: reading NIXL telemetry rings needs Linux (shared memory files mapped with mmap)")

// Ring is a NIXL telemetry ring; this platform cannot read one.
type Ring struct{}

// OpenRing is unavailable off Linux.
func OpenRing(path string) (*Ring, error) { return nil, errLinuxOnly }

// Header is unavailable off Linux.
func (r *Ring) Header() Header { return Header{} }

// Drain is unavailable off Linux.
func (r *Ring) Drain(max int) ([]Raw, int, error) { return nil, 0, errLinuxOnly }

// Same is unavailable off Linux.
func (r *Ring) Same() bool { return false }

// Close is unavailable off Linux.
func (r *Ring) Close() error { return nil }

func lockDir(dir string) (func(), error) { return nil, errLinuxOnly }
