package xfer

import (
	"context"
	"fmt"
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

// Output is how much of a transfer's descriptor pairs Compute works out
// and keeps.
type Output uint8

// The outputs, from the default.
const (
	// TallyPairs totals the pairs and keeps none: per rank pair its
	// descriptors, bytes and descriptors left after NIXL's merging, and
	// the group pairs (kvscope pd and POST /api/pd without --pairs). The
	// group-pair path tallies the pairs without writing any; vLLM's path
	// writes them a batch at a time and lets each batch go once tallied.
	TallyPairs Output = iota
	// CountPairs counts each rank pair's descriptors without writing or
	// tallying them: the handshake's checks, the path and Descs are as
	// TallyPairs gives them, while Merged, Bytes and the group pairs stay
	// zero (merging needs the pairs' addresses) and the handshake's
	// metadata holds each rank's identity, block size and compatibility
	// hash only. A search costs thousands of candidates this way.
	CountPairs
	// KeepPairs writes every descriptor pair into the result, with the
	// totals TallyPairs gives (the oracle and the descriptor view need
	// the pairs).
	KeepPairs
)

// String names the output as its constant does.
func (o Output) String() string {
	switch o {
	case TallyPairs:
		return "TallyPairs"
	case CountPairs:
		return "CountPairs"
	case KeepPairs:
		return "KeepPairs"
	}
	return "Output(" + strconv.Itoa(int(o)) + ")"
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
	// Output says how much of the pairs the result holds: their totals
	// (the zero value), their counts only, or every pair.
	Output Output
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
	PComputed int         `json:"-"`
	sums      *pairsTally // the written pairs tallied so far (finish, foldPairs)
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
	if note := pushPrefixNote(pp, t.Mode, hit); note != "" {
		t.Inferred = append(t.Inferred, note)
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
	countOnly := opt.Output == CountPairs
	if t.Handshake = opt.Handshake; t.Handshake == nil || opt.PRegs == nil || opt.DRegs == nil || countOnly {
		t.Handshake = newHandshake(m, t.PRegs, t.DRegs, opt.Connector, t.Mode, countOnly)
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
	if countOnly {
		for _, rp := range t.RankPairs {
			t.Descs += rp.Descs
		}
		return t, nil
	}
	if err := t.finish(opt.Ctx, opt.Output == KeepPairs); err != nil {
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
