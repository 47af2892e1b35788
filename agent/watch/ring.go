// Package watch reads what running vLLM engines and their NIXL agents
// expose on a GPU host, without changing them: NIXL's per-agent telemetry
// rings (NIXL_TELEMETRY_DIR), and turns it into kvscope's events.
//
// vLLM's ZMQ side channel is spoken by this package's own ZMTP 3 REQ
// client (NULL mechanism, zmtp.go) rather than github.com/go-zeromq/zmq4,
// because zmq4 panics on a malformed READY property and allocates any
// size a frame header claims, and offers no hook to bound either before
// it reads. The client checks every length against a limit before it
// allocates and keeps interop with libzmq's ROUTER, which vLLM binds (the
// tests still answer through zmq4's ROUTER).
//
// A NIXL telemetry ring is a file NIXL maps into the process of each agent
// (vLLM: one per worker, named by the agent's UUID). Its layout is NIXL's
// cyclic_buffer.h (unchanged from 0.6.0 to v1.4.0), native byte order:
//
//	off size field
//	  0    8 write_pos  (the writer's next slot, already masked)
//	  8    8 read_pos   (the reader's next slot: the reader writes it)
//	 16    4 version    (TELEMETRY_VERSION)
//	 20    4 expected_version
//	 24    8 capacity   (slots, a power of two)
//	 32    8 mask       (capacity - 1)
//	 40      capacity events
//
// Events by version: 1 (NIXL 0.6.0 to v1.0.1) is 56 bytes: u64 timestamp
// µs, i32 category, char name[32], 4 bytes of padding, u64 value. 2 (v1.1,
// v1.2) is 16 bytes: i32 category, u32 type, u64 value. 3 (v1.3.0, v1.3.2)
// and 4 (v1.3.1, v1.4.0) are 16 bytes: u32 type, 4 bytes of padding, u64
// value; 4 adds type 20, events dropped. The ring keeps one slot empty; a
// full ring drops the writer's new events, uncounted.
package watch

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// HeaderBytes is the ring's header.
const HeaderBytes = 40

// maxCapacity bounds the slots a ring may claim (NIXL's default is 4,096).
const maxCapacity = 1 << 24

// Header is a ring's header as read.
type Header struct {
	WritePos, ReadPos uint64
	Version, Expected int32
	Capacity, Mask    uint64
}

// EventBytes is an event's size in a version, or 0 for a version this
// reader does not know.
func EventBytes(version int32) int {
	switch version {
	case 1:
		return 56
	case 2, 3, 4:
		return 16
	}
	return 0
}

// RingError is a ring file this reader refuses, and why.
type RingError struct {
	File   string
	Reason string
}

func (e *RingError) Error() string { return fmt.Sprintf("watch: %s: %s", e.File, e.Reason) }

// ParseHeader reads and checks a ring's header against the file's size:
// a version this reader knows, matching its expected version, a
// power-of-two capacity with its mask, positions inside it, and a file
// exactly as long as the header and its slots.
func ParseHeader(file string, b []byte, size int64) (Header, error) {
	bad := func(format string, args ...any) (Header, error) {
		return Header{}, &RingError{file, fmt.Sprintf(format, args...)}
	}
	if len(b) < HeaderBytes {
		return bad("%d bytes: shorter than the %d-byte header", len(b), HeaderBytes)
	}
	le := binary.NativeEndian
	h := Header{WritePos: le.Uint64(b[0:]), ReadPos: le.Uint64(b[8:]), Version: int32(le.Uint32(b[16:])), Expected: int32(le.Uint32(b[20:])),
		Capacity: le.Uint64(b[24:]), Mask: le.Uint64(b[32:])}
	ev := EventBytes(h.Version)
	switch {
	case ev == 0:
		return bad("telemetry version %d, which this reader does not know (it reads 1 to 4: NIXL 0.6.0 to v1.4.0); not read", h.Version)
	case h.Expected != h.Version:
		return bad("version %d but expected version %d: not a NIXL ring, or one being written", h.Version, h.Expected)
	case h.Capacity == 0 || h.Capacity > maxCapacity || bits.OnesCount64(h.Capacity) != 1:
		return bad("capacity %d: want a power of two up to %d", h.Capacity, maxCapacity)
	case h.Mask != h.Capacity-1:
		return bad("mask %d for capacity %d", h.Mask, h.Capacity)
	case h.WritePos >= h.Capacity || h.ReadPos >= h.Capacity:
		return bad("positions write %d, read %d outside %d slots", h.WritePos, h.ReadPos, h.Capacity)
	}
	if want := int64(HeaderBytes) + int64(h.Capacity)*int64(ev); size != want {
		return bad("%d bytes, want %d for %d version-%d events (truncated, or still being created)", size, want, h.Capacity, h.Version)
	}
	return h, nil
}

// Raw is one telemetry event as NIXL wrote it.
type Raw struct {
	Type        string // NIXL's name: agent_tx_bytes, agent_err_backend, ...
	Value       uint64
	TimestampUS uint64 // version 1 only (µs since the epoch, at enqueue)
}

// typeNames are NIXL's event types by number (versions 2 to 4).
var typeNames = []string{
	"agent_tx_bytes", "agent_rx_bytes", "agent_tx_requests_num", "agent_rx_requests_num",
	"agent_memory_registered", "agent_memory_deregistered", "agent_xfer_time", "agent_xfer_post_time",
	"agent_err_not_posted", "agent_err_invalid_param", "agent_err_backend", "agent_err_not_found",
	"agent_err_mismatch", "agent_err_not_allowed", "agent_err_repost_active", "agent_err_unknown",
	"agent_err_not_supported", "agent_err_remote_disconnect", "agent_err_canceled", "agent_err_no_telemetry",
	"agent_telemetry_events_dropped",
}

// TypeCode is the number versions 2 to 4 give an event type's name.
func TypeCode(name string) (uint32, bool) {
	for i, n := range typeNames {
		if n == name {
			return uint32(i), true
		}
	}
	return 0, false
}

// DecodeEvent reads one event of a version; an event type this version
// does not define is an error, never a guess.
func DecodeEvent(version int32, b []byte) (Raw, error) {
	n := EventBytes(version)
	if n == 0 || len(b) < n {
		return Raw{}, fmt.Errorf("watch: a version-%d event needs %d bytes, got %d", version, n, len(b))
	}
	le := binary.NativeEndian
	switch version {
	case 1:
		name := b[12:44]
		end := 0
		for end < len(name) && name[end] != 0 {
			c := name[end]
			if c < 0x20 || c > 0x7e {
				return Raw{}, fmt.Errorf("watch: a version-1 event name holds byte %#x", c)
			}
			end++
		}
		if end == 0 || end == len(name) {
			return Raw{}, fmt.Errorf("watch: a version-1 event name is empty or not terminated")
		}
		return Raw{Type: string(name[:end]), Value: le.Uint64(b[48:]), TimestampUS: le.Uint64(b[0:])}, nil
	case 2:
		return typed(le.Uint32(b[4:]), le.Uint64(b[8:]), 20)
	case 3:
		return typed(le.Uint32(b[0:]), le.Uint64(b[8:]), 20)
	default: // 4
		return typed(le.Uint32(b[0:]), le.Uint64(b[8:]), 21)
	}
}

func typed(t uint32, v uint64, known uint32) (Raw, error) {
	if t >= known {
		return Raw{}, fmt.Errorf("watch: event type %d, which this version does not define (0 to %d)", t, known-1)
	}
	return Raw{Type: typeNames[t], Value: v}, nil
}
