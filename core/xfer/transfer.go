package xfer

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Mode is the direction of the NIXL operation: D reads (pull) or P writes
// (push). Data always flows from P to D.
type Mode string

// The modes.
const (
	Pull Mode = "pull"
	Push Mode = "push"
)

// Path names how a transfer was built.
type Path string

// The paths.
const (
	// VLLMPath is vLLM's own: matched plans, block ids flattened over
	// groups and broadcast over every region, vLLM's descriptor ids.
	VLLMPath Path = "vllm"
	// GroupPairPath is kvscope's: layer by layer per (P group, D group),
	// following token runs.
	GroupPairPath Path = "group-pairs"
)

// Loc is a byte range start inside one rank's registered region.
type Loc struct {
	Region int   `json:"region"`
	Offset int64 `json:"offset"`
}

// Pair is one descriptor pair: Len bytes from P's Src to D's Dst.
type Pair struct {
	Src    Loc     `json:"src"`
	Dst    Loc     `json:"dst"`
	Len    int64   `json:"len"`
	SrcID  int     `json:"src_desc_id"` // vLLM's descriptor id on P, -1 off the vLLM path
	DstID  int     `json:"dst_desc_id"` // on D
	Layer  string  `json:"layer"`       // "" for a padding slot on the vLLM path
	Seg    SegName `json:"segment"`
	Lo     int     `json:"lo"` // global head or channel range
	Hi     int     `json:"hi"`
	Tokens Span    `json:"tokens"` // token range (attention)
	PGroup int     `json:"p_group"`
	DGroup int     `json:"d_group"`
}

// RankPair is every descriptor pair between one P rank and one D rank: one
// NIXL READ (pull, posted by D) or WRITE (push, posted by P) per local
// handle.
type RankPair struct {
	P      int    `json:"p_rank"`
	D      int    `json:"d_rank"`
	Op     string `json:"op"` // READ or WRITE
	Notif  string `json:"notif"`
	Pairs  []Pair `json:"pairs,omitempty"`
	Bytes  int64  `json:"bytes"`
	Descs  int    `json:"descs"`
	Merged int    `json:"descs_merged"` // after NIXL merges contiguous runs
}

// rankPairs collects a transfer's rank pairs in the order they are first
// used.
type rankPairs struct {
	t     *Transfer
	byKey map[[2]int]*RankPair
	order [][2]int
}

func (t *Transfer) newRankPairs() *rankPairs {
	return &rankPairs{t: t, byKey: map[[2]int]*RankPair{}}
}

// get is the rank pair P pr -> D dr, made on first use.
func (r *rankPairs) get(pr, dr int) *RankPair {
	k := [2]int{pr, dr}
	if rp, ok := r.byKey[k]; ok {
		return rp
	}
	rp := r.t.rankPair(pr, dr)
	r.byKey[k] = &rp
	r.order = append(r.order, k)
	return &rp
}

// rankPair is an empty rank pair P pr -> D dr: a READ posted by D (pull)
// or a WRITE posted by P (push), its notification naming the initiator's
// TP size as vLLM's does.
func (t *Transfer) rankPair(pr, dr int) RankPair {
	op, initiatorTP := "READ", len(t.DRegs)
	if t.Mode == Push {
		op, initiatorTP = "WRITE", len(t.PRegs)
	}
	return RankPair{P: pr, D: dr, Op: op, Notif: "req-0:" + strconv.Itoa(initiatorTP)}
}

// store appends the rank pairs to the transfer, in order.
func (r *rankPairs) store() {
	for _, k := range r.order {
		r.t.RankPairs = append(r.t.RankPairs, *r.byKey[k])
	}
}

// GroupPair totals the descriptors between one P group and one D group.
type GroupPair struct {
	PGroup int    `json:"p_group"`
	DGroup int    `json:"d_group"`
	Kind   string `json:"kind"`
	Layers int    `json:"layers"`
	Descs  int    `json:"descs"`
	Bytes  int64  `json:"bytes"`
}

// Options configure a transfer computation.
type Options struct {
	Connector Connector
	PLayout   CacheLayout // "" means split K/V (blocks-first is forced next to Mamba state)
	DLayout   CacheLayout
	Bases     Bases // nil means DefaultBases
	// Blocks overrides the block ids of a side's groups (tests): P or D ->
	// group -> ids, for the pages the transfer lists.
	Blocks map[Side][][]int
	// KeepPairs keeps every descriptor pair in the result (the oracle and
	// the descriptor view need them); otherwise only totals are kept.
	KeepPairs bool
	// CountOnly counts each rank pair's descriptors without writing them:
	// the handshake's checks, the path and Descs are as a full
	// computation's, while Merged, Bytes and the group pairs stay zero
	// (merging needs the pairs' addresses) and the handshake's metadata
	// holds each rank's identity, block size and compatibility hash only.
	// A search costs thousands of candidates this way.
	CountOnly bool
	// PRegs and DRegs, when set, are P's and D's registrations made
	// already (RegisterAll, with the same plans, layouts and bases): a search
	// that pairs one P plan with many D plans registers P once. Compute
	// only reads them.
	PRegs, DRegs []*Registration
	// Handshake, when set with PRegs and DRegs, is their handshake made
	// already (newHandshake, for this connector, not brief): a deployment
	// serving many requests (PD) shakes hands once. Compute only reads it.
	Handshake *Handshake
	// pairing, when set with PRegs and DRegs, is their group-pair layout
	// made already (newPairing, with its jobs): a prepared deployment's.
	pairing *pairing
	// Ctx stops the computation once done (nil: never).
	Ctx context.Context
}

// canceled is ctx's error, or nil for no context.
func canceled(ctx context.Context) error {
	if ctx == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("xfer: stopped: %w", err)
	}
	return nil
}

// Transfer is the geometry of one request between two engines.
type Transfer struct {
	Mode       Mode        `json:"mode"`
	Path       Path        `json:"path"`
	PathReason string      `json:"path_reason"`
	Request    Request     `json:"request"` // with the effective prefix hit
	Handshake  *Handshake  `json:"handshake"`
	Rejection  *Rejection  `json:"rejection,omitempty"`
	RankPairs  []RankPair  `json:"rank_pairs"`
	GroupPairs []GroupPair `json:"group_pairs"`
	Bytes      int64       `json:"bytes"`
	Descs      int         `json:"descs"`
	Merged     int         `json:"descs_merged"`
	Logs       []string    `json:"logs"`
	Inferred   []string    `json:"inferred"`

	PRegs []*Registration `json:"-"`
	DRegs []*Registration `json:"-"`
	// PPages and DPages are the block ids each side's groups use for this
	// request (what the oracle materialises).
	PPages []Pages `json:"-"`
	DPages []Pages `json:"-"`
	// DNeed is the token range D must receive, per D layer.
	DNeed map[string]Span `json:"-"`
	// PComputed is how many tokens P prefilled.
	PComputed int    `json:"-"`
	tally     *tally // the pairs tallied so far (finish, foldPairs)
	// tallied says the path totalled its rank pairs and group pairs as it
	// wrote the pairs (the group-pair path): finish only sums them.
	tallied bool

	model *model.Model
}

// Compute builds the transfer of one request from P's plan to D's plan.
// A geometry the transfer cannot express is not an error: the result's
// Rejection says why. Errors are for bad input.
func Compute(m *model.Model, pp, dp *plan.Plan, req Request, opt Options) (*Transfer, error) {
	if err := req.Check(pp, dp); err != nil {
		return nil, err
	}
	t := &Transfer{Mode: modeOf(opt.Connector), Request: req, Logs: []string{}, Inferred: []string{}, GroupPairs: []GroupPair{}, RankPairs: []RankPair{}, model: m}
	hit, why := effectiveHit(dp, req)
	t.Request.PrefixHitTokens = hit
	if why != "" {
		t.Logs = append(t.Logs, why)
	}
	var err error
	if t.PRegs = opt.PRegs; t.PRegs == nil {
		if t.PRegs, err = registerAll(opt.Ctx, m, pp, P, opt.PLayout, opt.Bases, nil); err != nil {
			return nil, err
		}
	}
	if t.DRegs = opt.DRegs; t.DRegs == nil {
		if t.DRegs, err = registerAll(opt.Ctx, m, dp, D, opt.DLayout, opt.Bases, nil); err != nil {
			return nil, err
		}
	}
	if t.Handshake = opt.Handshake; t.Handshake == nil || opt.PRegs == nil || opt.DRegs == nil || opt.CountOnly {
		t.Handshake = newHandshake(m, t.PRegs, t.DRegs, opt.Connector, t.Mode, opt.CountOnly)
	}
	if t.Handshake.Rejection != nil {
		t.Rejection = t.Handshake.Rejection
		return t, nil
	}
	t.PComputed = tokensComputedByP(pp, req.PromptTokens)
	if t.Handshake.Matched {
		t.Path, t.PathReason = VLLMPath, t.Handshake.MatchReason
		t.Inferred = append(t.Inferred, t.Handshake.VLLMInferred...)
		err = t.vllmPath(opt)
	} else {
		t.Path, t.PathReason = GroupPairPath, t.Handshake.MatchReason
		t.Inferred = append(t.Inferred, "the group-pair path (per P group, D group, following token runs) is kvscope's design; vLLM has none")
		err = t.groupPairPath(opt)
	}
	if err != nil {
		return nil, err
	}
	if t.Rejection != nil {
		return t, nil
	}
	if opt.CountOnly {
		for _, rp := range t.RankPairs {
			t.Descs += rp.Descs
		}
		return t, nil
	}
	if err := t.finish(opt.Ctx, opt.KeepPairs); err != nil {
		return nil, err
	}
	return t, nil
}

// Check reports a request the two plans cannot serve: fewer than two
// prompt tokens, a negative prefix hit, or more tokens than max_model_len.
func (req Request) Check(pp, dp *plan.Plan) error {
	switch {
	case req.PromptTokens < 2:
		return fmt.Errorf("xfer: --prompt-tokens %d: a transfer needs at least 2 prompt tokens (D recomputes the last)", req.PromptTokens)
	case req.PrefixHitTokens < 0:
		return fmt.Errorf("xfer: --prefix-hit-tokens %d: must not be negative", req.PrefixHitTokens)
	case req.PromptTokens > pp.Engine.MaxModelLen || req.PromptTokens > dp.Engine.MaxModelLen:
		return fmt.Errorf("xfer: --prompt-tokens %d exceeds max_model_len (P %d, D %d)", req.PromptTokens, pp.Engine.MaxModelLen, dp.Engine.MaxModelLen)
	}
	return nil
}

// RegisterAll registers every rank of one side's plan as Compute does
// (layout "" is split K/V; bases nil the default bases), for
// Options.PRegs and Options.DRegs.
func RegisterAll(m *model.Model, p *plan.Plan, side Side, layout CacheLayout, bases Bases) ([]*Registration, error) {
	return registerAll(nil, m, p, side, layout, bases, nil)
}

// RegisterAllInto is RegisterAll building into old, registrations the
// caller no longer uses (of any plan of the model): their memory is taken
// over, so that a search registering plan after plan allocates little.
// Registrations built from old must not be used afterwards; nor must any
// registration that shared its rank-independent parts with one of them
// (the other ranks of old's RegisterAll).
func RegisterAllInto(old []*Registration, m *model.Model, p *plan.Plan, side Side, layout CacheLayout, bases Bases) ([]*Registration, error) {
	return registerAll(nil, m, p, side, layout, bases, old)
}

func registerAll(ctx context.Context, m *model.Model, p *plan.Plan, side Side, layout CacheLayout, bases Bases, old []*Registration) ([]*Registration, error) {
	tp := p.Engine.TensorParallelSize
	out := emptied(old, tp)
	var index map[string]*model.Layer
	for _, r := range old {
		if r != nil && r.model == m && r.modelIdx != nil {
			index = r.modelIdx
			break
		}
	}
	if index == nil {
		index = layerIndex(m)
	}
	for r := 0; r < tp; r++ {
		if err := canceled(ctx); err != nil {
			return nil, err
		}
		var like, into *Registration
		if r > 0 {
			like = out[0]
		}
		if r < len(old) {
			into = old[r]
		}
		reg, err := register(into, m, index, p, side, r, layout, bases, like)
		if err != nil {
			return nil, err
		}
		out = append(out, reg)
	}
	return out, nil
}

// tally totals a transfer's pairs as they come: per rank pair its
// descriptors, bytes and the descriptors left after NIXL merges contiguous
// runs, and per (P group, D group) the group pairs. Pairs can be tallied a
// batch at a time (a long prompt's pairs need not all be held to be
// counted: see foldPairs).
type tally struct {
	gps    map[[2]int]*GroupPair
	layers map[[2]int]map[string]bool
	order  [][2]int
	ranks  map[[2]int]*rankTally
}

// rankTally is where one rank pair's tally stands: its totals and the
// last pair tallied (a run and a group pair continue across batches).
type rankTally struct {
	descs, merged int
	bytes         int64
	prev          Pair
	group         *GroupPair
	last          [2]int
	lastLayer     string
}

// add tallies pairs of rank pair rp, after those tallied before.
func (t *Transfer) add(ctx context.Context, rp *RankPair, pairs []Pair) error {
	a := t.tally
	if a == nil {
		a = &tally{gps: map[[2]int]*GroupPair{}, layers: map[[2]int]map[string]bool{}, ranks: map[[2]int]*rankTally{}}
		t.tally = a
	}
	r := a.ranks[[2]int{rp.P, rp.D}]
	if r == nil {
		r = &rankTally{lastLayer: "\x00"}
		a.ranks[[2]int{rp.P, rp.D}] = r
	}
	for n, p := range pairs {
		if n&(1<<16-1) == 0 && n > 0 {
			if err := canceled(ctx); err != nil {
				return err
			}
		}
		if r.descs == 0 || !mergesWith(r.prev, p) {
			r.merged++
		}
		r.prev = p
		r.descs++
		r.bytes += p.Len
		k := [2]int{p.PGroup, p.DGroup}
		if r.group != nil && k == r.last {
			r.group.Descs++
			r.group.Bytes += p.Len
			if p.Layer != r.lastLayer && p.Layer != "" {
				a.layers[k][p.Layer] = true
				r.lastLayer = p.Layer
			}
			continue
		}
		r.last, r.lastLayer = k, p.Layer
		g, ok := a.gps[k]
		if !ok {
			kind := ""
			if reg, ok := t.DRegs[rp.D].Layer(p.Layer); ok {
				kind = string(reg.Kind)
			}
			g = &GroupPair{PGroup: p.PGroup, DGroup: p.DGroup, Kind: kind}
			a.gps[k] = g
			a.layers[k] = map[string]bool{}
			a.order = append(a.order, k)
		}
		r.group = g
		g.Descs++
		g.Bytes += p.Len
		if p.Layer != "" {
			a.layers[k][p.Layer] = true
		}
	}
	return nil
}

// foldAt is how many pairs a rank pair holds, when the caller keeps none,
// before they are tallied and let go (foldPairs).
const foldAt = 1 << 16

// foldPairs tallies rp's pairs and empties it, when the caller keeps no
// pairs and rp holds foldAt or more: a 2^20-token prompt's millions of
// pairs (hundreds of MB, which the collector would walk) never exist at
// once.
func (t *Transfer) foldPairs(opt Options, rp *RankPair) error {
	if opt.KeepPairs || len(rp.Pairs) < foldAt {
		return nil
	}
	if err := t.add(opt.Ctx, rp, rp.Pairs); err != nil {
		return err
	}
	rp.Pairs = rp.Pairs[:0]
	return nil
}

// finish tallies the pairs the rank pairs still hold and totals the
// transfer: per rank pair, per group pair, in all. It walks every pair
// (millions for a long prompt), so it stops, as the pairs' making does,
// once ctx is done.
func (t *Transfer) finish(ctx context.Context, keep bool) error {
	for i := range t.RankPairs {
		if err := canceled(ctx); err != nil {
			return err
		}
		rp := &t.RankPairs[i]
		if !t.tallied {
			if err := t.add(ctx, rp, rp.Pairs); err != nil {
				return err
			}
			r := t.tally.ranks[[2]int{rp.P, rp.D}]
			rp.Descs, rp.Merged, rp.Bytes = r.descs, r.merged, r.bytes
		}
		t.Bytes += rp.Bytes
		t.Descs += rp.Descs
		t.Merged += rp.Merged
		if !keep {
			rp.Pairs = nil
		}
	}
	if t.tally == nil {
		return nil
	}
	a := t.tally
	sort.Slice(a.order, func(i, j int) bool {
		if a.order[i][0] != a.order[j][0] {
			return a.order[i][0] < a.order[j][0]
		}
		return a.order[i][1] < a.order[j][1]
	})
	for _, k := range a.order {
		g := a.gps[k]
		g.Layers = len(a.layers[k])
		t.GroupPairs = append(t.GroupPairs, *g)
	}
	t.tally = nil
	return nil
}

// MergedCount is the number of descriptors NIXL posts after merging runs of
// consecutive pairs that are contiguous on both sides (same regions, each
// starting where the previous ended) and of one length. NIXL's makeXferReq
// (v1.4) merges only inside a dense run of its prepared list, and a run
// holds descriptors of one length: pairs of different lengths are never
// merged, back to back or not (real NIXL's telemetry descCount agrees; see
// agent/transfer's NIXL tests).
func MergedCount(pairs []Pair) int {
	n := 0
	for i, p := range pairs {
		if i == 0 || !mergesWith(pairs[i-1], p) {
			n++
		}
	}
	return n
}

// mergesWith reports whether NIXL merges pair p into q, the pair before
// it (continues).
func mergesWith(q, p Pair) bool { return continues(q.Src, q.Dst, q.Len, p.Src, p.Dst, p.Len) }

// continues reports whether a pair of n bytes from src to dst continues
// one of lastLen bytes from lastSrc to lastDst, so that NIXL merges them:
// same length, same regions, each side starting where the last ended.
func continues(lastSrc, lastDst Loc, lastLen int64, src, dst Loc, n int64) bool {
	return lastLen == n && lastSrc.Region == src.Region && lastDst.Region == dst.Region &&
		lastSrc.Offset+lastLen == src.Offset && lastDst.Offset+lastLen == dst.Offset
}

// modeOf is the mode a connector moves KV in: push for NixlPushConnector,
// else pull (a connector that moves none is read as NIXL's).
func modeOf(c Connector) Mode {
	if kind, ok := c.Transport(); ok && kind == NixlPush {
		return Push
	}
	return Pull
}

func (t *Transfer) reject(rule, side, detail, fix string) {
	t.Rejection = &Rejection{Rule: rule, Side: side, Detail: detail, Fix: fix}
}
