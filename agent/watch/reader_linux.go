//go:build linux

package watch

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Ring is one NIXL telemetry ring, mapped shared and read as its one
// consumer: Drain copies the events between read_pos and write_pos and
// then advances read_pos in the file, as NIXL's own readers do. Two
// readers of one ring would each see part of the events, so a directory
// is locked by the Watcher that reads it.
type Ring struct {
	path string
	f    *os.File
	mem  []byte
	hdr  Header
	ev   int
	ino  uint64
}

// OpenRing maps a ring file after checking its header.
func OpenRing(path string) (*Ring, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("watch: %w (the reader advances read_pos, so it needs write access: run as the engines' user)", err)
	}
	fail := func(err error) (*Ring, error) {
		f.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	head := make([]byte, HeaderBytes)
	if n, _ := f.ReadAt(head, 0); n < HeaderBytes {
		return fail(&RingError{path, fmt.Sprintf("%d bytes: shorter than the %d-byte header", st.Size(), HeaderBytes)})
	}
	h, err := ParseHeader(path, head, st.Size())
	if err != nil {
		return fail(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("watch: %s: mmap: %w", path, err))
	}
	var ino uint64
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = s.Ino
	}
	return &Ring{path: path, f: f, mem: mem, hdr: h, ev: EventBytes(h.Version), ino: ino}, nil
}

// Header is the ring's header as opened.
func (r *Ring) Header() Header { return r.hdr }

func (r *Ring) pos(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

// Drain reads at most max events (the writer keeps writing meanwhile) and
// advances read_pos past them. A slot that does not decode is skipped and
// counted in bad; positions a writer could not have written (outside the
// capacity) stop the ring with an error. A file truncated under the
// mapping (a read of a page past its end is SIGBUS) stops the ring with
// an error too: the reads run with debug.SetPanicOnFault, and the fault
// comes back as a *RingError instead of ending the process.
func (r *Ring) Drain(max int) (events []Raw, bad int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		fault, ok := p.(interface{ Addr() uintptr })
		if !ok {
			panic(p) // not a fault of the mapping: a bug, not input
		}
		now := "unknown"
		if st, serr := r.f.Stat(); serr == nil {
			now = fmt.Sprint(st.Size())
		}
		events, bad = nil, 0
		err = &RingError{r.path, fmt.Sprintf("truncated or replaced under the reader: a fault (SIGBUS) reading the mapping at offset %d; the file holds %s bytes, %d are mapped",
			int64(fault.Addr()-uintptr(unsafe.Pointer(&r.mem[0]))), now, len(r.mem))}
	}()
	return r.drain(max)
}

func (r *Ring) drain(max int) (events []Raw, bad int, err error) {
	w := atomic.LoadUint64(r.pos(0))
	rp := atomic.LoadUint64(r.pos(8))
	if w >= r.hdr.Capacity || rp >= r.hdr.Capacity {
		return nil, 0, &RingError{r.path, fmt.Sprintf("positions write %d, read %d outside %d slots: the file changed under the reader", w, rp, r.hdr.Capacity)}
	}
	events = make([]Raw, 0, min(int((w-rp)&r.hdr.Mask), max))
	for rp != w && len(events)+bad < max {
		off := HeaderBytes + int(rp)*r.ev
		e, derr := DecodeEvent(r.hdr.Version, r.mem[off:off+r.ev])
		if derr != nil {
			bad++
		} else {
			events = append(events, e)
		}
		rp = (rp + 1) & r.hdr.Mask
	}
	atomic.StoreUint64(r.pos(8), rp)
	return events, bad, nil
}

// Same reports whether path is still this ring's file (not removed and
// created again by a restarted agent).
func (r *Ring) Same() bool {
	st, err := os.Stat(r.path)
	if err != nil {
		return false
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && s.Ino == r.ino && st.Size() == int64(len(r.mem))
}

// Close unmaps and closes the file; it never removes it.
func (r *Ring) Close() error {
	err := syscall.Munmap(r.mem)
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockDir takes an exclusive, non-blocking lock on a directory: one
// Watcher reads a telemetry directory. The lock goes with the process.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("watch: --nixl-telemetry-dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("watch: %s is read by another kvscope watcher (only one reader may advance a ring's read position): %w", dir, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
