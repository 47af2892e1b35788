//go:build nixl && cgo

// nixl_cgo.go holds every cgo call of the nixl backend: thin Go wrappers
// over the shim (nixl_shim.h), each turning a status into a *NIXLError.
// The backend's logic (nixl.go, nixl_peer.go) uses only these.
//
// Threads: each NIXL agent runs NIXL's progress thread and is created in
// NIXL_THREAD_SYNC_STRICT mode, so NIXL locks its own state against that
// thread; our own calls into an agent are serialised by the backend's
// mutex (NIXL.mu), so no two goroutines are ever inside one agent at once.
// No C++ exception crosses into Go: the shim catches every one.

package transfer

/*
#cgo CXXFLAGS: -std=c++17 -I/opt/nvidia/nvda_nixl/include -I/usr/local/nixl/include
#cgo LDFLAGS: -L/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -Wl,-rpath,/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu
#cgo LDFLAGS: -L/usr/local/nixl/lib/x86_64-linux-gnu -Wl,-rpath,/usr/local/nixl/lib/x86_64-linux-gnu
#cgo LDFLAGS: -lnixl -lnixl_build -lstdc++
#include <stdlib.h>
#include "nixl_shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/kvscope/kvscope/core/xfer"
)

// cDlist is a prepared descriptor list (nixlDlistH) of an agent.
type cDlist = *C.kvs_dlist

// nixlAgent is one side's NIXL agent.
type nixlAgent struct {
	side xfer.Side
	name string
	h    *C.kvs_agent
	regs []nixlRegList // what it registered, for deregistration
	peer string        // the agent whose metadata it loaded
}

// nixlRegList is one registerMem call: parallel arrays of buffers.
type nixlRegList struct {
	addr, len, dev []uint64
}

// nixlReq is one NIXL request: a rank pair's descriptors.
type nixlReq struct {
	x    *C.kvs_xfer
	rank int  // index into Prepared.ranks
	done bool // a Post or Poll saw it complete
}

// The memory kind and operations of the shim (nixl_mem_t, nixl_xfer_op_t
// values), and NIXL's two non-error statuses.
const (
	nixlDRAM    = C.KVS_MEM_DRAM
	nixlRead    = int(C.KVS_READ)
	nixlWrite   = int(C.KVS_WRITE)
	nixlSuccess = 0 // NIXL_SUCCESS
	nixlInProg  = 1 // NIXL_IN_PROG
)

// The shim's codes as nixl_status.go names them (a build without cgo has
// no C): a mismatch does not compile.
var (
	_ = [1]struct{}{}[shimErrException-C.KVS_ERR_EXCEPTION]
	_ = [1]struct{}{}[shimErrNoMemory-C.KVS_ERR_NO_MEMORY]
	_ = [1]struct{}{}[shimErrArgument-C.KVS_ERR_ARGUMENT]
)

func nixlFreeDlist(h cDlist) error {
	_, err := nixlCall("releasedDlistH", func(e *C.char, l C.size_t) C.int { return C.kvs_dlist_free(h, e, l) })
	return err
}

// nixlRelease releases requests, keeping the first error.
func nixlRelease(reqs []*nixlReq) error {
	var first error
	for _, r := range reqs {
		if x := r.x; x != nil {
			r.x = nil
			if _, err := nixlCall("releaseXferReq", func(e *C.char, l C.size_t) C.int { return C.kvs_xfer_free(x, e, l) }); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// nixlCall runs one shim call with an error buffer and turns a negative
// status into a *NIXLError.
func nixlCall(op string, f func(err *C.char, errlen C.size_t) C.int) (int, error) {
	var buf [512]C.char
	st := int(f(&buf[0], C.size_t(len(buf))))
	if st < 0 {
		return st, &NIXLError{Op: op, Status: st, Msg: C.GoString(&buf[0])}
	}
	return st, nil
}

// nixlU64s passes a slice to C (Go memory without Go pointers, not retained).
func nixlU64s(s []uint64) *C.uint64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint64_t)(unsafe.Pointer(&s[0]))
}

func (a *nixlAgent) register(rl nixlRegList, undo bool) error {
	op := "registerMem"
	if undo {
		op = "deregisterMem"
	}
	_, err := nixlCall(op+" ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		if undo {
			return C.kvs_deregister(a.h, nixlDRAM, nixlU64s(rl.addr), nixlU64s(rl.len), nixlU64s(rl.dev), C.size_t(len(rl.addr)), e, l)
		}
		return C.kvs_register(a.h, nixlDRAM, nixlU64s(rl.addr), nixlU64s(rl.len), nixlU64s(rl.dev), C.size_t(len(rl.addr)), e, l)
	})
	return err
}

func (a *nixlAgent) localMD() ([]byte, error) {
	var p unsafe.Pointer
	var size C.size_t
	if _, err := nixlCall("getLocalMD ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_local_md(a.h, &p, &size, e, l)
	}); err != nil {
		return nil, err
	}
	defer C.kvs_buf_free(p)
	return C.GoBytes(p, C.int(size)), nil
}

func (a *nixlAgent) loadMD(md []byte) (string, error) {
	if len(md) == 0 {
		return "", fmt.Errorf("transfer: nixl: empty metadata for agent %s", a.name)
	}
	cmd := C.CBytes(md)
	defer C.free(cmd)
	var name [256]C.char
	if _, err := nixlCall("loadRemoteMD ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_load_md(a.h, cmd, C.size_t(len(md)), &name[0], C.size_t(len(name)), e, l)
	}); err != nil {
		return "", err
	}
	return C.GoString(&name[0]), nil
}

func (a *nixlAgent) invalidate(remote string) error {
	cr := C.CString(remote)
	defer C.free(unsafe.Pointer(cr))
	_, err := nixlCall("invalidateRemoteMD ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_invalidate_md(a.h, cr, e, l)
	})
	return err
}

// prepDlist prepares descriptors of the agent's own memory (remote "")
// or of a peer's.
func (a *nixlAgent) prepDlist(remote string, addr, lens []uint64, dev uint64) (cDlist, error) {
	var cr *C.char
	if remote != "" {
		cr = C.CString(remote)
		defer C.free(unsafe.Pointer(cr))
	}
	var d *C.kvs_dlist
	_, err := nixlCall("prepXferDlist ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_dlist_prep(a.h, cr, nixlDRAM, nixlU64s(addr), nixlU64s(lens), C.uint64_t(dev), C.size_t(len(addr)), &d, e, l)
	})
	return d, err
}

func (a *nixlAgent) makeXfer(op int, local cDlist, lidx []int32, remote cDlist, ridx []int32) (*C.kvs_xfer, error) {
	var x *C.kvs_xfer
	_, err := nixlCall("makeXferReq ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_xfer_make(a.h, C.int(op), local, (*C.int32_t)(unsafe.Pointer(&lidx[0])), remote, (*C.int32_t)(unsafe.Pointer(&ridx[0])),
			C.size_t(len(lidx)), &x, e, l)
	})
	return x, err
}

func (a *nixlAgent) notifs() ([]string, error) {
	var p unsafe.Pointer
	var size, count C.size_t
	_, err := nixlCall("getNotifs ("+a.name+")", func(e *C.char, l C.size_t) C.int {
		return C.kvs_notifs(a.h, &p, &size, &count, e, l)
	})
	if p == nil {
		return nil, err
	}
	buf := C.GoBytes(p, C.int(size))
	C.kvs_buf_free(p)
	out := make([]string, 0, int(count))
	next := func() (string, bool) {
		if len(buf) < 4 {
			return "", false
		}
		k := int(binary.NativeEndian.Uint32(buf))
		if len(buf) < 4+k {
			return "", false
		}
		s := string(buf[4 : 4+k])
		buf = buf[4+k:]
		return s, true
	}
	for len(buf) > 0 {
		_, ok1 := next() // the sender; records come ordered by it
		msg, ok2 := next()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("transfer: nixl getNotifs (%s): malformed records", a.name)
		}
		out = append(out, msg)
	}
	return out, err
}

func (r *nixlReq) post(notif string) (int, error) {
	var cn *C.char
	if notif != "" {
		cn = C.CString(notif)
		defer C.free(unsafe.Pointer(cn))
	}
	has := C.int(0)
	if notif != "" {
		has = 1
	}
	return nixlCall("postXferReq", func(e *C.char, l C.size_t) C.int {
		return C.kvs_xfer_post(r.x, has, cn, C.size_t(len(notif)), e, l)
	})
}

// nixlTelem is one request's getXferTelemetry, in microseconds.
type nixlTelem struct {
	startUS, postUS, xferUS, bytes, descs uint64
}

func (r *nixlReq) telemetry() (nixlTelem, error) {
	var c [5]C.uint64_t
	_, err := nixlCall("getXferTelemetry", func(e *C.char, l C.size_t) C.int {
		return C.kvs_xfer_telemetry(r.x, &c[0], &c[1], &c[2], &c[3], &c[4], e, l)
	})
	return nixlTelem{uint64(c[0]), uint64(c[1]), uint64(c[2]), uint64(c[3]), uint64(c[4])}, err
}

func (r *nixlReq) status() (int, error) {
	return nixlCall("getXferStatus", func(e *C.char, l C.size_t) C.int { return C.kvs_xfer_status(r.x, e, l) })
}

// create makes the agent and the named backend plugin on it, NIXL's
// progress thread running.
func (a *nixlAgent) create(backend string) error {
	cname := C.CString(a.name)
	defer C.free(unsafe.Pointer(cname))
	cbackend := C.CString(backend)
	defer C.free(unsafe.Pointer(cbackend))
	_, err := nixlCall("create agent "+a.name, func(e *C.char, l C.size_t) C.int {
		return C.kvs_agent_new(cname, cbackend, 1, &a.h, e, l)
	})
	return err
}

// free destroys the agent.
func (a *nixlAgent) free() {
	C.kvs_agent_free(a.h)
	a.h = nil
}

// nixlAlloc allocates size bytes of zeroed, page-aligned host memory.
func nixlAlloc(size int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	_, err := nixlCall("alloc", func(e *C.char, l C.size_t) C.int {
		return C.kvs_mem_alloc(C.uint64_t(size), &p, e, l)
	})
	return p, err
}

// nixlFree frees what nixlAlloc returned.
func nixlFree(p unsafe.Pointer) { C.kvs_mem_free(p) }
