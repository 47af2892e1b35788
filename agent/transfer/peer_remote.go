package transfer

import (
	"fmt"
	"io"
	"time"

	"github.com/kvscope/kvscope/agent/transfer/peer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// Remote is D's backend in two-agent mode: D's regions in local host
// memory, P's read over TCP from a PeerServer. Register performs the
// handshake: P's metadata must be what D planned for P.
type Remote struct {
	*Host
	*peerClient
	conns  int
	pool   chan *peerConn
	pSizes [][]int64 // rank -> region -> bytes of pRegs, for Prepare
}

// NewRemote makes D's backend, reading from the P agent at addr over conns
// parallel connections once Register is called.
func NewRemote(addr, token string, conns int, limit int64, kindOf func(string) string) *Remote {
	return &Remote{Host: NewHost(limit, kindOf), peerClient: newPeerClient(addr, token), conns: max(1, conns)}
}

// Name implements Backend.
func (r *Remote) Name() string { return "host+tcp" }

// splitRegs separates P's registrations from D's.
func splitRegs(regs []*xfer.Registration) (p, d []*xfer.Registration) {
	for _, reg := range regs {
		if reg.Side == xfer.P {
			p = append(p, reg)
		} else {
			d = append(d, reg)
		}
	}
	return p, d
}

// Register allocates D's regions locally, connects to P and checks P's
// metadata against P's registrations as D planned them.
func (r *Remote) Register(regs []*xfer.Registration) error {
	pRegs, dRegs := splitRegs(regs)
	if err := r.Host.Register(dRegs); err != nil {
		return err
	}
	r.pRegs, r.dMD = pRegs, r.Host.SideMetadata(xfer.D)
	r.pSizes = regionSizes(pRegs)
	r.pool = make(chan *peerConn, r.conns)
	if err := r.connect(); err != nil {
		return err
	}
	for i := 1; i <= r.conns; i++ {
		pc, err := r.dial(i)
		if err != nil {
			r.closeConns()
			return err
		}
		r.pool <- pc
	}
	return nil
}

// Prepare validates D's side of each descriptor against D's regions and
// P's side against P's regions as planned (P checks them again).
func (r *Remote) Prepare(x *xfer.Transfer) (*Prepared, error) {
	return r.Host.prepare(x, func(rank int) limits {
		l := limits{side: xfer.P, rank: rank, why: r}
		if rank >= 0 && rank < len(r.pSizes) {
			l.size = r.pSizes[rank]
		}
		return l
	})
}

// refuse implements refuser: P's side is checked against P's regions as
// planned, D's against D's registered regions.
func (r *Remote) refuse(side xfer.Side, rank int, at xfer.Loc, n int64) error {
	if side != xfer.P {
		return r.Host.refuse(side, rank, at, n)
	}
	_, reg, err := regionOf(r.pRegs, xfer.P, rank, at.Region)
	if err == nil {
		err = checkRange(xfer.P, rank, reg, at.Offset, n)
	}
	return err
}

// Post reads each rank pair's batches over its own connection, straight
// into D's regions.
func (r *Remote) Post(p *Prepared, notif string) (Handle, error) {
	return r.Host.post(p, notif, func(ro rankOps, start time.Time) ([]event.BatchData, error) {
		pc := <-r.pool
		out, err := runBatches(ro, start, r.Host.clock, func(b batch) error { return pc.read(&ro, b.ops) })
		if err != nil {
			// The connection may be mid-message: replace it.
			pc.c.Close()
			if fresh, derr := r.dial(1); derr == nil {
				pc = fresh
			}
		}
		r.pool <- pc
		return out, err
	})
}

// read fetches a rank pair's ops in chunks of at most peer.MaxReadBytes.
func (pc *peerConn) read(ro *rankOps, ops []copyOp) error {
	defer pc.c.SetDeadline(time.Time{})
	for len(ops) > 0 {
		pc.c.SetDeadline(time.Now().Add(peer.OpTimeout))
		n, bytes := 0, int64(0)
		for n < len(ops) && (n == 0 || bytes+ops[n].n <= peer.MaxReadBytes) {
			bytes += ops[n].n
			n++
		}
		msg := peer.EncodeRead(n, func(i int) peer.Desc {
			op := ops[i]
			return peer.Desc{Rank: uint32(ro.p), Region: uint32(op.src.Region), Offset: uint64(op.src.Offset), Len: uint64(op.n)}
		})
		if err := peer.WriteMsg(pc.w, peer.MsgRead, msg); err != nil {
			return &peer.Error{Op: "read", Err: err}
		}
		typ, size, err := peer.ReadHeader(pc.r, peer.MaxReadBytes)
		if err != nil {
			return &peer.Error{Op: "read", Err: err}
		}
		if typ == peer.MsgError {
			body := make([]byte, size)
			io.ReadFull(pc.r, body)
			return &peer.Error{Op: "read", Err: fmt.Errorf("P says: %s", body)}
		}
		if typ != peer.MsgData || int64(size) != bytes {
			return &peer.Error{Op: "read", Err: fmt.Errorf("got message %q of %d bytes, want %d bytes of data", typ, size, bytes)}
		}
		for _, op := range ops[:n] {
			if _, err := io.ReadFull(pc.r, ro.dst.bytes(op.dst, op.n)); err != nil {
				return &peer.Error{Op: "read", Err: err}
			}
		}
		ops = ops[n:]
	}
	return nil
}

func (r *Remote) closeConns() {
	r.closeCtrl()
	for {
		select {
		case pc := <-r.pool:
			pc.c.Close()
		default:
			return
		}
	}
}

// Close drops the connections and D's buffers; a transfer in flight fails.
func (r *Remote) Close() error {
	r.closeConns()
	return r.Host.Close()
}
