// Package oracle proves a transfer's descriptor pairs on bytes.
//
// It materialises only the pages a request touches, as byte buffers per
// rank and region; fills every P page with tags that encode the layer, the
// segment (K, V, latent, conv part, SSM), the global head or channel, the
// token and the byte; fills D with a sentinel; replays the pairs (a pull
// reads into D, a push writes into D: either way P's bytes land in D); and
// then reads every materialised D page through D's own layout. A D row is
// right when it holds exactly P's tag for the same layer, segment, index
// and token, or is untouched (the sentinel) and D does not need it; bytes
// that belong to no layer may hold only the sentinel or P's padding. Every
// token D needs (xfer.Need) and every state row must hold P's tag.
//
// The verdict is exact, rejected (with the handshake's reason) or wrong
// (with the first mismatch). The oracle shares no code with the geometry it
// checks beyond the registrations' layouts and xfer.Need, the rule for
// which tokens D needs.
package oracle

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"

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
	return fmt.Sprintf("D rank %d, layer %s %s, index %d, token %d (region %d block %d): %s; expected %s, found %s",
		m.DRank, m.Layer, m.Segment, m.Index, m.Token, m.Region, m.Block, m.What, m.Expected, m.Found)
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

// MaxBytes bounds the bytes one check materialises, so an enormous request
// fails with a message instead of exhausting memory.
const MaxBytes = 2 << 30

// Check replays a transfer computed with KeepPairs and verifies D's bytes.
func Check(m *model.Model, x *xfer.Transfer) (*Result, error) {
	return CheckContext(context.Background(), m, x)
}

// CheckContext is Check, stopped with ctx's error soon after ctx is done
// (every 4,096 pairs and every D page run look at it).
func CheckContext(ctx context.Context, m *model.Model, x *xfer.Transfer) (*Result, error) {
	if x.Rejection != nil {
		return &Result{Verdict: Rejected, Reason: x.Rejection.Error()}, nil
	}
	o := newRun(m, x, nil)
	o.ctx = ctx
	defer o.release()
	if err := o.materialise(); err != nil {
		return nil, err
	}
	res := &Result{Verdict: Exact}
	for _, rp := range x.RankPairs {
		res.Pairs += len(rp.Pairs)
		for i, p := range rp.Pairs {
			if i%4096 == 0 {
				if err := o.stopped(); err != nil {
					return nil, err
				}
			}
			res.Bytes += p.Len
			if err := o.copy(rp.P, rp.D, p); err != nil {
				return &Result{Verdict: Wrong, Mismatch: &Mismatch{DRank: rp.D, Layer: p.Layer, Segment: string(p.Seg), Token: -1, What: err.Error()}, Pairs: res.Pairs}, nil
			}
		}
	}
	o.verifyAll(res)
	if err := o.stopped(); err != nil {
		return nil, err
	}
	return res, nil
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

func (o *run) verifyAll(res *Result) {
	for j := range o.x.DRegs {
		if o.stopped() != nil {
			return // CheckContext reports it
		}
		mm, n := o.verify(j)
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
	res := &Result{Verdict: Exact}
	for _, rp := range p.o.x.RankPairs {
		res.Pairs += len(rp.Pairs)
		for _, q := range rp.Pairs {
			res.Bytes += q.Len
		}
	}
	p.o.verifyAll(res)
	return res
}

// pageKey is one block of one region.
type pageKey struct {
	region int
	block  int
}

// alloc carves a page out of the run's arena, starting a new arena chunk
// when the current one is full.
func (o *run) alloc(n int64) []byte {
	if int64(cap(o.arena)-len(o.arena)) < n {
		size := max(n, 64<<20)
		if a, ok := arenas.Get().(*[]byte); ok && int64(cap(*a)) >= n {
			o.arena = (*a)[:0]
		} else {
			o.arena = make([]byte, 0, size)
		}
		chunk := o.arena
		o.chunks = append(o.chunks, &chunk)
	}
	l := len(o.arena)
	o.arena = o.arena[:l+int(n)]
	return o.arena[l : l+int(n) : l+int(n)]
}

// release returns the run's arena chunks for the next check.
func (o *run) release() {
	for _, c := range o.chunks {
		b := (*c)[:0]
		arenas.Put(&b)
	}
	o.chunks = nil
}

// arenas recycles page memory between checks (sweeps run thousands).
var arenas sync.Pool

// owner is which group (and page of the request) a block serves on a side.
type owner struct {
	group int
	page  int
}

type run struct {
	ctx     context.Context // nil: never stopped
	arena   []byte          // pages are carved from here; returned to the pool after the check
	mem     Memory          // an agent's memory, or nil for the check's own pages
	skipP   bool            // P's blocks live in another agent
	skipD   bool            // only P's blocks are prepared here
	m       *model.Model
	x       *xfer.Transfer
	layerID map[string]uint64
	p, d    []map[pageKey][]byte // per rank
	pOwn    map[int]owner        // block id -> owner on P (ids are per side)
	dOwn    map[int]owner
	total   int64
	scratch []byte
	chunks  []*[]byte

	// the last pages copy looked up (pairs often walk one page)
	lastSrc, lastDst         []byte
	lastSrcKey, lastDstKey   pageKey
	lastSrcRank, lastDstRank int
}

func owners(groups []xfer.Pages) map[int]owner {
	out := map[int]owner{}
	for g, pg := range groups {
		for i, id := range pg.IDs {
			out[id] = owner{g, pg.First + i}
		}
	}
	return out
}

// materialise allocates and fills every page a pair reads (P) or writes
// (D), and every page D allocated for the request.
func (o *run) materialise() error {
	x := o.x
	o.pOwn, o.dOwn = owners(x.PPages), owners(x.DPages)
	o.p = make([]map[pageKey][]byte, len(x.PRegs))
	o.d = make([]map[pageKey][]byte, len(x.DRegs))
	for i := range o.p {
		o.p[i] = map[pageKey][]byte{}
	}
	for i := range o.d {
		o.d[i] = map[pageKey][]byte{}
	}
	for _, rp := range x.RankPairs {
		for i, p := range rp.Pairs {
			if i%256 == 0 {
				if err := o.stopped(); err != nil {
					return err
				}
			}
			if !o.skipP {
				if err := o.touch(x.PRegs[rp.P], o.p[rp.P], p.Src, p.Len, true); err != nil {
					return err
				}
			}
			if !o.skipD {
				if err := o.touch(x.DRegs[rp.D], o.d[rp.D], p.Dst, p.Len, false); err != nil {
					return err
				}
			}
		}
	}
	if o.skipD {
		return nil
	}
	for j, reg := range x.DRegs {
		for _, l := range reg.Layers {
			if err := o.stopped(); err != nil {
				return err
			}
			for _, s := range l.Segments {
				for _, id := range x.DPages[l.Group].IDs {
					if err := o.ensure(reg, o.d[j], pageKey{s.Region, id}, false); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// touch materialises the pages a byte range spans.
func (o *run) touch(reg *xfer.Registration, pagesOf map[pageKey][]byte, at xfer.Loc, n int64, isP bool) error {
	if at.Region < 0 || at.Region >= len(reg.Regions) || at.Offset < 0 || n <= 0 {
		return nil // copy reports it
	}
	bl := reg.Regions[at.Region].BlockLen
	for b := at.Offset / bl; b*bl < at.Offset+n; b++ {
		if err := o.ensure(reg, pagesOf, pageKey{at.Region, int(b)}, isP); err != nil {
			return err
		}
	}
	return nil
}

func (o *run) ensure(reg *xfer.Registration, pagesOf map[pageKey][]byte, k pageKey, isP bool) error {
	if _, ok := pagesOf[k]; ok {
		return nil
	}
	bl := reg.Regions[k.region].BlockLen
	var page []byte
	if o.mem != nil {
		if page = o.mem.Block(reg.Side, reg.Rank, k.region, k.block); int64(len(page)) != bl {
			return fmt.Errorf("oracle: %s rank %d region %d block %d is not in the agent's memory", reg.Side, reg.Rank, k.region, k.block)
		}
	} else {
		o.total += bl
		if o.total > MaxBytes {
			return fmt.Errorf("oracle: the request touches more than %d MiB of pages; use a shorter --prompt-tokens", MaxBytes>>20)
		}
		page = o.alloc(bl)
	}
	if isP {
		o.fillP(reg, k, page)
	} else {
		fill(page, Sentinel)
	}
	pagesOf[k] = page
	return nil
}

func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for i := 1; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}

// fillP writes P's tags into one page: the layer that owns the block in
// this region's tensor, segment by segment; everything else is padding.
func (o *run) fillP(reg *xfer.Registration, k pageKey, page []byte) {
	own, ok := o.pOwn[k.block]
	var l *xfer.LayerReg
	if ok {
		region := reg.Regions[k.region]
		l, _ = reg.Layer(reg.TensorMembers[region.Tensor][own.group])
	}
	if l == nil {
		fill(page, Padding)
		return
	}
	at := int64(0)
	for _, s := range l.Segments { // segments are laid out in offset order
		if s.Region != k.region {
			continue
		}
		fill(page[at:s.Offset], Padding)
		o.eachSlab(l, s, own.page, func(off int64, key uint64) {
			tagSlab(page[off:off+s.IndexBytes], s.RowBytes, key, s.IsAttention())
		})
		at = s.Offset + s.Bytes()
	}
	fill(page[at:], Padding)
}

// eachSlab visits every index of a segment in one page: the byte offset of
// its slab in the block and the tag key of its first row (attention rows
// count tokens up from it).
func (o *run) eachSlab(l *xfer.LayerReg, s xfer.Segment, page int, fn func(off int64, key uint64)) {
	lid := o.layerID[l.Name]
	seg := segID(s.Name)
	token := 0
	if s.IsAttention() {
		token = page * l.BlockSize
	}
	for idx := s.Lo; idx < s.Hi; idx++ {
		fn(s.Offset+int64(idx-s.Lo)*s.IndexBytes, rowKey(lid, seg, idx, token))
	}
}

func segID(n xfer.SegName) uint64 {
	for i, s := range []xfer.SegName{xfer.SegK, xfer.SegV, xfer.SegLatent, xfer.SegConvQ, xfer.SegConvK, xfer.SegConvV,
		xfer.SegConvX, xfer.SegConvB, xfer.SegConvC, xfer.SegSSM} {
		if s == n {
			return uint64(i + 1)
		}
	}
	return 0
}

// rowKey packs a row's coordinates; tag expands it into bytes that differ
// for every coordinate and every byte position.
func rowKey(layer, seg uint64, index, token int) uint64 {
	return layer<<52 ^ seg<<46 ^ uint64(index)<<28 ^ uint64(token)
}

func mix(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// tag fills a row with its coordinates' bytes: a strong hash of the
// coordinates, stepped by an odd constant per 8-byte word, so no two rows
// and no two positions in a row share bytes.
func tag(row []byte, key uint64) {
	h := mix(key)
	b := row
	for len(b) >= 16 {
		binary.LittleEndian.PutUint64(b, h)
		binary.LittleEndian.PutUint64(b[8:], h+tagStep)
		h += tagStep2
		b = b[16:]
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, h)
		h += tagStep
		b = b[8:]
	}
	if len(b) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], h)
		copy(b, w[:])
	}
}

// tagStep advances the tag from one 8-byte word of a row to the next.
const tagStep uint64 = 0xD1B54A32D192ED03

// tagStep2 is two steps: 2 * tagStep mod 2^64.
const tagStep2 uint64 = 0xa36a9465a325da06

// matchRow reports whether row holds tag(key)'s bytes.
func matchRow(row []byte, key uint64) bool {
	h := mix(key)
	b := row
	for len(b) >= 16 {
		if binary.LittleEndian.Uint64(b) != h || binary.LittleEndian.Uint64(b[8:]) != h+tagStep {
			return false
		}
		h += tagStep2
		b = b[16:]
	}
	if len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != h {
			return false
		}
		h += tagStep
		b = b[8:]
	}
	if len(b) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], h)
		return bytes.Equal(b, w[:len(b)])
	}
	return true
}

func matchSlab(slab []byte, rowBytes int64, key0 uint64, attention bool) bool {
	for r := int64(0); r*rowBytes < int64(len(slab)); r++ {
		key := key0
		if attention {
			key += uint64(r)
		}
		if !matchRow(slab[r*rowBytes:(r+1)*rowBytes], key) {
			return false
		}
	}
	return true
}

// tagSlab fills one index's rows (a head's tokens, or one state index).
func tagSlab(slab []byte, rowBytes int64, key0 uint64, attention bool) {
	for r := int64(0); r*rowBytes < int64(len(slab)); r++ {
		key := key0
		if attention {
			key += uint64(r)
		}
		tag(slab[r*rowBytes:(r+1)*rowBytes], key)
	}
}

// copy replays one pair, page by page.
func (o *run) copy(pRank, dRank int, p xfer.Pair) error {
	pReg, dReg := o.x.PRegs[pRank], o.x.DRegs[dRank]
	if p.Src.Region < 0 || p.Src.Region >= len(pReg.Regions) || p.Dst.Region < 0 || p.Dst.Region >= len(dReg.Regions) {
		return fmt.Errorf("descriptor names a region outside the registration (P %d, D %d)", p.Src.Region, p.Dst.Region)
	}
	pbl, dbl := pReg.Regions[p.Src.Region].BlockLen, dReg.Regions[p.Dst.Region].BlockLen
	if p.Src.Offset < 0 || p.Dst.Offset < 0 || p.Src.Offset+p.Len > pbl*pReg.Regions[p.Src.Region].NumBlocks ||
		p.Dst.Offset+p.Len > dbl*dReg.Regions[p.Dst.Region].NumBlocks {
		return fmt.Errorf("descriptor of %d B runs outside its region (P offset %d, D offset %d)", p.Len, p.Src.Offset, p.Dst.Offset)
	}
	src, dst, left := p.Src.Offset, p.Dst.Offset, p.Len
	for left > 0 {
		sk, dk := pageKey{p.Src.Region, int(src / pbl)}, pageKey{p.Dst.Region, int(dst / dbl)}
		if sk != o.lastSrcKey || pRank != o.lastSrcRank || o.lastSrc == nil {
			o.lastSrc, o.lastSrcKey, o.lastSrcRank = o.p[pRank][sk], sk, pRank
		}
		if dk != o.lastDstKey || dRank != o.lastDstRank || o.lastDst == nil {
			o.lastDst, o.lastDstKey, o.lastDstRank = o.d[dRank][dk], dk, dRank
		}
		sp, dp := o.lastSrc, o.lastDst
		si, di := src%pbl, dst%dbl
		n := min(left, pbl-si, dbl-di)
		copy(dp[di:di+n], sp[si:si+n])
		src, dst, left = src+n, dst+n, left-n
	}
	return nil
}

// verify reads back every materialised page of one D rank.
func (o *run) verify(j int) (*Mismatch, int64) {
	reg := o.x.DRegs[j]
	keys := make([]pageKey, 0, len(o.d[j]))
	for k := range o.d[j] {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].region != keys[b].region {
			return keys[a].region < keys[b].region
		}
		return keys[a].block < keys[b].block
	})
	var checked int64
	for i, k := range keys {
		if i%256 == 0 && o.stopped() != nil {
			return nil, checked // CheckContext reports it
		}
		page := o.d[j][k]
		checked += int64(len(page))
		if mm := o.verifyPage(j, reg, k, page); mm != nil {
			mm.DRank, mm.Region, mm.Block = j, k.region, k.block
			return mm, checked
		}
	}
	return nil, checked
}

func (o *run) verifyPage(j int, reg *xfer.Registration, k pageKey, page []byte) *Mismatch {
	own, ok := o.dOwn[k.block]
	var l *xfer.LayerReg
	if ok {
		region := reg.Regions[k.region]
		l, _ = reg.Layer(reg.TensorMembers[region.Tensor][own.group])
	}
	type span struct{ lo, hi int64 }
	var covered []span
	name := ""
	if l != nil {
		name = l.Name
		need := xfer.Need(l.Kind, l.Window, l.Chunk, o.x.Request.PromptTokens, o.x.Request.PrefixHitTokens)
		for _, s := range l.Segments {
			if s.Region != k.region {
				continue
			}
			covered = append(covered, span{s.Offset, s.Offset + s.Bytes()})
			if cap(o.scratch) < int(s.IndexBytes) {
				o.scratch = make([]byte, s.IndexBytes)
			}
			var mm *Mismatch
			o.eachSlab(l, s, own.page, func(off int64, key uint64) {
				if mm != nil {
					return
				}
				slab := page[off : off+s.IndexBytes]
				if matchSlab(slab, s.RowBytes, key, s.IsAttention()) {
					return
				}
				want := o.scratch[:s.IndexBytes]
				tagSlab(want, s.RowBytes, key, s.IsAttention())
				// Row by row: an unneeded row may be untouched.
				for r := int64(0); r*s.RowBytes < s.IndexBytes; r++ {
					row, w := slab[r*s.RowBytes:(r+1)*s.RowBytes], want[r*s.RowBytes:(r+1)*s.RowBytes]
					if bytes.Equal(row, w) {
						continue
					}
					idx := s.Lo + int((off-s.Offset)/s.IndexBytes)
					token := -1
					if s.IsAttention() {
						token = own.page*l.BlockSize + int(r)
					}
					needed := !s.IsAttention() || need.Lo <= token && token < need.Hi
					if all(row, Sentinel) && !needed {
						continue
					}
					what := "holds bytes of another place"
					if all(row, Sentinel) {
						what = "needed but never written"
					} else if all(row, Padding) {
						what = "holds padding"
					}
					mm = &Mismatch{Layer: l.Name, Segment: string(s.Name), Index: idx, Token: token, Expected: short(w), Found: short(row), What: what}
					return
				}
			})
			if mm != nil {
				return mm
			}
		}
	}
	sort.Slice(covered, func(a, b int) bool { return covered[a].lo < covered[b].lo })
	at := int64(0)
	check := func(lo, hi int64) *Mismatch {
		if i := firstForeign(page[lo:hi]); i >= 0 {
			return &Mismatch{Layer: name, Segment: "none", Index: -1, Token: -1, Expected: "sentinel or padding", Found: short(page[lo+int64(i) : min(hi, lo+int64(i)+8)]),
				What: fmt.Sprintf("byte %d of the block belongs to no row of this layer but was written", lo+int64(i))}
		}
		return nil
	}
	for _, c := range covered {
		if c.lo > at {
			if mm := check(at, c.lo); mm != nil {
				return mm
			}
		}
		at = max(at, c.hi)
	}
	if at < int64(len(page)) {
		return check(at, int64(len(page)))
	}
	return nil
}

// firstForeign returns the index of the first byte that is neither the
// sentinel nor padding, or -1.
func firstForeign(b []byte) int {
	for at := 0; at < len(b); {
		n := min(len(b)-at, len(sentinelSlab))
		chunk := b[at : at+n]
		if bytes.Equal(chunk, sentinelSlab[:n]) || bytes.Equal(chunk, paddingSlab[:n]) {
			at += n
			continue
		}
		for i, x := range chunk {
			if x != Sentinel && x != Padding {
				return at + i
			}
		}
		at += n
	}
	return -1
}

var sentinelSlab, paddingSlab = bytes.Repeat([]byte{Sentinel}, 4096), bytes.Repeat([]byte{Padding}, 4096)

func all(b []byte, v byte) bool {
	slab := sentinelSlab
	if v == Padding {
		slab = paddingSlab
	}
	for len(b) > 0 {
		n := min(len(b), len(slab))
		if !bytes.Equal(b[:n], slab[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func short(b []byte) string {
	if len(b) > 8 {
		b = b[:8]
	}
	return hex.EncodeToString(b)
}
