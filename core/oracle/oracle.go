// Package oracle proves a transfer's descriptor pairs on bytes.
//
// Every P byte a request touches holds a tag: bytes that the layer, the
// segment (K, V, latent, conv part, SSM), the global head or channel, the
// token and the byte's place in its row determine (tag.go says how), and
// padding where no layer lives; every D page the request touches starts
// as a sentinel; the pairs are replayed (a pull reads into D, a push
// writes into D: either way P's bytes land in D); and then every such D
// page is read through D's own layout. A D row is right when it holds
// exactly P's tag for the same layer, segment, index and token, or is
// untouched (the sentinel) and D does not need it; bytes that belong to no
// layer may hold only the sentinel or P's padding. Every token D needs
// (xfer.Need) and every state row must hold P's tag.
//
// Check keeps no P page: P's bytes are a function of where they lie, so
// each pair's piece of a P page is written straight into its D page. Nor
// does it keep D's pages: a pair writes D and reads only P, so D's pages
// are independent, and Check builds each one (the sentinel, then the
// pieces that land in it, in the pairs' order) and reads it back before
// the next. A Prover instead tags P's blocks and fills D's in an agent's
// memory, and reads D back after the agent has moved the bytes.
//
// The verdict is exact, rejected (with the handshake's reason) or wrong
// (with the first mismatch). The oracle shares no code with the geometry it
// checks beyond the registrations' layouts and xfer.Need, the rule for
// which tokens D needs.
package oracle

import (
	"context"
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/xfer"
)

// Verdict is the outcome of one case.
type Verdict string

// The verdicts.
const (
	Exact    Verdict = "exact"
	Rejected Verdict = "rejected"
	Wrong    Verdict = "wrong"
)

// Sentinel fills D before the replay; Padding fills P bytes that belong to
// no layer.
const (
	Sentinel byte = 0xA5
	Padding  byte = 0x5A
)

// Mismatch locates the first wrong byte row.
type Mismatch struct {
	DRank    int    `json:"d_rank"`
	Region   int    `json:"region"`
	Block    int    `json:"block"`
	Layer    string `json:"layer"` // "" for bytes that belong to no layer
	Segment  string `json:"segment"`
	Index    int    `json:"index"` // global head or channel
	Token    int    `json:"token"` // -1 for state rows and padding
	Expected string `json:"expected"`
	Found    string `json:"found"`
	What     string `json:"what"`
}

func (m *Mismatch) String() string {
	s := fmt.Sprintf("D rank %d, layer %s %s, index %d, token %d (region %d block %d): %s",
		m.DRank, m.Layer, m.Segment, m.Index, m.Token, m.Region, m.Block, m.What)
	if m.Expected == "" && m.Found == "" {
		return s // a fault of the descriptors, not of bytes read back
	}
	return s + fmt.Sprintf("; expected %s, found %s", m.Expected, m.Found)
}

// Result is the oracle's verdict on one transfer.
type Result struct {
	Verdict  Verdict   `json:"verdict"`
	Reason   string    `json:"reason,omitempty"`
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	Pairs    int       `json:"pairs"`
	Bytes    int64     `json:"bytes_moved"`
	Checked  int64     `json:"bytes_checked"` // D bytes read back and verified
}

// MaxBytes bounds the bytes of the pages one check touches (P's and D's,
// as a Prover materialises them), so an enormous request fails with a
// message instead of running for minutes or exhausting memory.
const MaxBytes = 2 << 30

// Check replays a transfer computed with KeepPairs and verifies D's bytes.
func Check(m *model.Model, x *xfer.Transfer) (*Result, error) {
	return CheckContext(context.Background(), m, x)
}

// CheckContext is Check, stopped with ctx's error soon after ctx is done
// (the pair loops look at it every 256 or 4,096 pairs, the read-back every
// 256 pages).
func CheckContext(ctx context.Context, m *model.Model, x *xfer.Transfer) (*Result, error) {
	if x.Rejection != nil {
		return &Result{Verdict: Rejected, Reason: x.Rejection.Error()}, nil
	}
	o := newRun(m, x, nil)
	o.ctx = ctx
	return o.check()
}

func newRun(m *model.Model, x *xfer.Transfer, mem Memory) *run {
	o := &run{m: m, x: x, mem: mem, layerID: make(map[string]uint64, len(m.Layers))}
	for i, l := range m.Layers {
		o.layerID[l.Name] = uint64(i + 1)
	}
	return o
}

// stopped is the run's context's error, if it has one and it is done.
func (o *run) stopped() error {
	if o.ctx == nil {
		return nil
	}
	if err := o.ctx.Err(); err != nil {
		return fmt.Errorf("oracle: stopped: %w", err)
	}
	return nil
}

// verifyAll reads back every D rank's pages, as pageOf gives them, until
// the first mismatch.
func (o *run) verifyAll(res *Result, pageOf func(j int, k pageKey) []byte) {
	for j := range o.x.DRegs {
		if o.stopped() != nil {
			return // CheckContext reports it
		}
		mm, n := o.verify(j, pageOf)
		res.Checked += n
		if mm != nil {
			res.Verdict, res.Mismatch = Wrong, mm
			return
		}
	}
}

// Memory holds the bytes of the registered regions a check reads and
// writes: an agent's real buffers, where the agent moves the bytes itself.
type Memory interface {
	// Block returns one block of a rank's region, or nil when this memory
	// does not hold it.
	Block(side xfer.Side, rank, region, block int) []byte
}

// Prover proves a transfer an agent performs in its own memory: NewProver
// tags P's blocks the pairs read and fills D's blocks with the sentinel;
// the agent copies; Verify reads D back.
type Prover struct {
	o *run
}

// NewProver prepares mem for a transfer computed with KeepPairs. When P's
// memory lives in another agent (remoteP), only D's blocks are prepared
// here; FillP prepares P's there.
func NewProver(m *model.Model, x *xfer.Transfer, mem Memory, remoteP bool) (*Prover, error) {
	if x.Rejection != nil {
		return nil, fmt.Errorf("oracle: the transfer is rejected: %v", x.Rejection)
	}
	o := newRun(m, x, mem)
	o.skipP = remoteP
	if err := o.materialise(); err != nil {
		return nil, err
	}
	return &Prover{o: o}, nil
}

// FillP tags the P blocks a transfer reads, in a P agent's memory: what a
// prefill would have written there.
func FillP(m *model.Model, x *xfer.Transfer, mem Memory) error {
	o := newRun(m, x, mem)
	o.skipD = true
	return o.materialise()
}

// Verify checks every D block of the transfer after the agent's copies.
func (p *Prover) Verify() *Result {
	if twice := overlapVerdict(p.o.x); twice != nil {
		return twice
	}
	res := &Result{Verdict: Exact}
	for _, rp := range p.o.x.RankPairs {
		res.Pairs += len(rp.Pairs)
		for _, q := range rp.Pairs {
			res.Bytes += q.Len
		}
	}
	p.o.verifyAll(res, func(j int, k pageKey) []byte {
		n, _ := p.o.d[j].get(k)
		return p.o.dPages[n]
	})
	return res
}
