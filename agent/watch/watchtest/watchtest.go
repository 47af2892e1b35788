// Package watchtest writes NIXL telemetry rings from their documented
// layout (see package watch), for tests and benchmarks: a stand-in for an
// agent of any telemetry version.
package watchtest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvscope/kvscope/agent/watch"
)

// Writer writes one ring as NIXL's cyclic_buffer does.
type Writer struct {
	Path     string
	Version  int32
	Capacity uint64
}

// NewWriter creates a ring file (an unknown version gets 16-byte slots).
func NewWriter(dir, name string, version int32, capacity uint64) (*Writer, error) {
	w := &Writer{Path: filepath.Join(dir, name), Version: version, Capacity: capacity}
	b := make([]byte, watch.HeaderBytes+int(capacity)*w.slot())
	le := binary.NativeEndian
	le.PutUint32(b[16:], uint32(version))
	le.PutUint32(b[20:], uint32(version))
	le.PutUint64(b[24:], capacity)
	le.PutUint64(b[32:], capacity-1)
	return w, os.WriteFile(w.Path, b, 0o644)
}

func (w *Writer) slot() int {
	if n := watch.EventBytes(w.Version); n > 0 {
		return n
	}
	return 16
}

// Push appends events as the writer does, dropping them once the ring is
// full; it returns how many went in.
func (w *Writer) Push(events ...watch.Raw) (int, error) {
	f, err := os.OpenFile(w.Path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	head := make([]byte, watch.HeaderBytes)
	if _, err := f.ReadAt(head, 0); err != nil {
		return 0, err
	}
	le := binary.NativeEndian
	wp, rp := le.Uint64(head[0:]), le.Uint64(head[8:])
	n := w.slot()
	in := 0
	for _, e := range events {
		next := (wp + 1) & (w.Capacity - 1)
		if next == rp {
			break // full: the new event is dropped
		}
		slot := make([]byte, n)
		switch w.Version {
		case 1:
			le.PutUint64(slot[0:], e.TimestampUS)
			copy(slot[12:44], e.Type)
			le.PutUint64(slot[48:], e.Value)
		default:
			code, ok := watch.TypeCode(e.Type)
			if !ok {
				return in, fmt.Errorf("watchtest: no event type %s", e.Type)
			}
			at := 0
			if w.Version == 2 {
				at = 4 // after the category
			}
			le.PutUint32(slot[at:], code)
			le.PutUint64(slot[8:], e.Value)
		}
		if _, err := f.WriteAt(slot, int64(watch.HeaderBytes+int(wp)*n)); err != nil {
			return in, err
		}
		wp = next
		in++
	}
	le.PutUint64(head[0:], wp)
	_, err = f.WriteAt(head[0:8], 0)
	return in, err
}

// Transfer is one request's four events, in NIXL v1.4's order.
func Transfer(dir string, bytes, post, time uint64) []watch.Raw {
	return []watch.Raw{{Type: "agent_xfer_post_time", Value: post}, {Type: "agent_xfer_time", Value: time},
		{Type: "agent_" + dir + "_bytes", Value: bytes}, {Type: "agent_" + dir + "_requests_num", Value: 1}}
}
