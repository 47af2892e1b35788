package tune

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// Space is a search: the model (with its draft layers), the flags P and D
// keep, the ranges searched, the request whose descriptors are counted and
// the objective.
type Space struct {
	Model     *model.Model
	ModelName string      // as vllm serve names it (the config's name when empty)
	DraftName string      // the draft model vllm serve loads ("mtp": the model's own MTP layers)
	P, D      plan.Engine // the fixed flags of each engine
	Ranges    Ranges
	Request   xfer.Request // the request whose descriptors a candidate costs (default 4,096 prompt tokens)
	Objective Objective
	Top       int // candidates listed (default 20)
	// Shard and Shards split the search between searches run apart (one
	// per browser worker): this one evaluates the runs of one TP pair and
	// block sizes whose ordinal is Shard modulo Shards; Merge brings the
	// others' Partial in. Shards 0 or 1 is the whole search.
	Shard, Shards int
}

// Candidate is one point of the space.
type Candidate struct {
	Index          int    `json:"index"`
	TP             TPPair `json:"tp"`
	PBlockSize     int    `json:"p_block_size"` // as given: 0 is the version's
	DBlockSize     int    `json:"d_block_size"`
	MinGroupLayers int    `json:"min_kv_cache_group_layers"` // 0: the engines' own
	Selector       string `json:"selector"`                  // "": the engines' own
	MaxBatched     int    `json:"max_num_batched_tokens"`    // D's; 0: D's own
	KVCacheDType   string `json:"kv_cache_dtype"`            // "": the engines' own
	Connector      string `json:"connector"`
}

// engines is the candidate's P and D engines.
func (c Candidate) engines(p, d plan.Engine) (plan.Engine, plan.Engine) {
	p.TensorParallelSize, d.TensorParallelSize = c.TP.P, c.TP.D
	if c.PBlockSize != 0 {
		p.BlockSize = c.PBlockSize
	}
	d.BlockSize = c.DBlockSize
	if c.MinGroupLayers != 0 {
		p.MinGroupLayers, d.MinGroupLayers = c.MinGroupLayers, c.MinGroupLayers
	}
	if c.Selector != "" {
		p.Selector, d.Selector = plan.Selector(c.Selector), plan.Selector(c.Selector)
	}
	if c.MaxBatched != 0 {
		d.MaxNumBatchedTokens = c.MaxBatched
	}
	if c.KVCacheDType != "" {
		p.KVCacheDType, d.KVCacheDType = c.KVCacheDType, c.KVCacheDType
	}
	return p, d
}

// Scored is a candidate vLLM and the handshake accept, with its figures.
type Scored struct {
	Candidate
	PBlock       int      `json:"p_block_size_planned"` // attention block sizes as planned (after alignment)
	DBlock       int      `json:"d_block_size_planned"`
	PGroups      int      `json:"p_groups"`
	DGroups      int      `json:"d_groups"`
	DKVTokens    int64    `json:"d_kv_cache_tokens"`
	PKVTokens    int64    `json:"p_kv_cache_tokens"`
	DConcurrency float64  `json:"d_max_concurrency"`
	Descs        int      `json:"descriptors_per_request"`
	Merged       int      `json:"descriptors_merged"`
	PaddingBytes int64    `json:"padding_bytes_per_request"` // P's and D's, per rank
	PagesDivide  bool     `json:"pages_divide"`
	Path         string   `json:"path"` // vllm or group-pairs
	Score        float64  `json:"score"`
	OnFront      bool     `json:"pareto"`
	PServe       string   `json:"p_vllm_serve"`
	DServe       string   `json:"d_vllm_serve"`
	Inferred     bool     `json:"inferred"` // the plans or the transfer rest on inferred rules
	Notes        []string `json:"notes,omitempty"`
}

// Engines are a candidate's P and D engines as the search plans them
// (the connector's effect included).
func (s *Search) Engines(c Candidate) (plan.Engine, plan.Engine) {
	pe, de := c.engines(s.space.P, s.space.D)
	if s.connEng[c.Connector].disableHybrid {
		pe.DisableHybrid, de.DisableHybrid = true, true
	}
	return pe, de
}

// Refusal counts the candidates refused for one reason.
type Refusal struct {
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
	Example string `json:"example"` // the first refused candidate's message
	first   int    // that candidate's index
}

// Result is a search's outcome so far.
type Result struct {
	Objective Objective    `json:"objective"`
	Request   xfer.Request `json:"request"`
	Total     int          `json:"candidates"`
	Evaluated int          `json:"evaluated"`
	Feasible  int          `json:"feasible"`
	Refused   []Refusal    `json:"refused"`
	// Top is the best candidates, best first; Front is the Pareto front of
	// D KV tokens (more) against descriptors per request (fewer), by KV
	// tokens; All is every feasible candidate, in candidate order.
	Top   []Scored `json:"top"`
	Front []Scored `json:"pareto_front"`
	// Dividing is the best candidate whose P and D pages divide (nil when
	// none does): descriptors then follow whole pages.
	Dividing *Scored  `json:"best_pages_divide"`
	All      []Scored `json:"-"`
	// Inferred says which figures rest on behaviour kvscope infers.
	Inferred []string `json:"inferred"`
	// Partial marks a search stopped before its last candidate (a
	// server's deadline): the figures rank the Evaluated candidates only,
	// and Stopped says why. A whole search leaves both out.
	Partial bool   `json:"partial,omitempty"`
	Stopped string `json:"stopped,omitempty"`
}

// Search is a search under way.
type Search struct {
	space      Space
	conn       map[string]xfer.Connector
	connEng    map[string]connEngines // what each connector does to the engines, as the version runs them
	flagErrs   map[flagKey]error      // vLLM's verdict on a block size, per version
	candidates []Candidate
	next       int
	feasible   []Scored
	refused    map[string]*Refusal
	order      []string // refusal reasons, first seen first
	planner    *plan.Planner
	plannerFor [3]int                  // the TP pair and D block size the planner has ranks for
	plans      map[plan.Engine]planned // P's plans (few: P's flags vary little)
	transfers  map[transferKey]transferred
	pRegs      map[regKey][]*xfer.Registration // P's registrations, per P plan
	// dRegs are D's registrations of the current run, per plan
	// geometry: the run's candidates pair few D geometries with several P
	// plans and batched-token limits (which change only D's number of
	// blocks, which no count depends on: see signature).
	dRegs    map[uint64][]*xfer.Registration
	spare    [][]*xfer.Registration // the last runs' D registrations, whose memory the next ones take over
	inferred map[string]bool
	all      []Candidate                         // every candidate of the space (candidates are this shard's)
	merged   struct{ candidates, evaluated int } // what merged partials counted
	sig      []byte                              // scratch for signatures
	dPlan    plan.Plan                           // D's plan of the candidate under way (dRegs point at it: used only while it holds their geometry)
}

// connEngines is what a connector does to the engines before planning
// (xfer.ConnectorEngines, for the search's version and model: the same for
// every candidate).
type connEngines struct {
	disableHybrid bool
	notes         []string
	err           error
}

// flagKey is what Engine.CheckFlags reads.
type flagKey struct {
	version string
	block   int
}

// regKey names a plan's registrations: its geometry and its number of
// blocks (the regions' sizes).
type regKey struct {
	sig    uint64
	blocks int64
}

type planned struct {
	p   *plan.Plan
	err error
}

// transferKey names a transfer by hashes of its plans' geometry.
type transferKey struct {
	p, d      uint64
	connector string
}

type transferred struct {
	stopped   bool // ctx ended during the computation (not kept)
	descs     int
	path      string
	rejection *xfer.Rejection
	inferred  []string
	err       error
}

// NewSearch checks the space and lists its candidates.
func NewSearch(s Space) (*Search, error) {
	if s.Model == nil {
		return nil, errors.New("tune: no model")
	}
	if s.Request.PromptTokens == 0 {
		s.Request.PromptTokens = 4096
	}
	if s.Top == 0 {
		s.Top = 20
	}
	if s.Top < 0 || s.Top > 1000 {
		return nil, &RangeError{Flag: "--top", Value: fmt.Sprint(s.Top), Reason: "list 1 to 1000 candidates"}
	}
	if s.Objective.Name == "" {
		s.Objective.Name = ByKVTokens
	}
	if err := s.Objective.check(); err != nil {
		return nil, err
	}
	r := s.Ranges
	or := func(v, def string) string {
		if strings.TrimSpace(v) == "" {
			return def
		}
		return v
	}
	pTP, dTP := max(s.P.TensorParallelSize, 1), max(s.D.TensorParallelSize, 1)
	tps, err := ParseTPPairs("--tp-pairs", or(r.TPPairs, fmt.Sprintf("%d:%d", pTP, dTP)))
	if err != nil {
		return nil, err
	}
	dBlocks, err := ParseInts("--block-sizes", or(r.BlockSizes, DefaultBlockSizes), 1, MaxBlockSize, true)
	if err != nil {
		return nil, err
	}
	pBlocks, err := ParseInts("--p-block-sizes", or(r.PBlockSizes, fmt.Sprint(s.P.BlockSize)), 1, MaxBlockSize, true)
	if err != nil {
		return nil, err
	}
	minLayers, err := ParseInts("--min-group-layers", or(r.MinGroupLayers, "0"), 1, 1<<10, true)
	if err != nil {
		return nil, err
	}
	selectors, err := ParseWords("--selectors", or(r.Selectors, "default"), Selectors)
	if err != nil {
		return nil, err
	}
	mnbts, err := ParseInts("--mnbt", or(r.MaxBatched, "0"), 1, MaxBatchedTokens, true)
	if err != nil {
		return nil, err
	}
	dtypes, err := ParseWords("--kv-cache-dtypes", or(r.KVCacheDTypes, "default"), append([]string{""}, KVCacheDTypes...))
	if err != nil {
		return nil, err
	}
	conns, err := ParseWords("--connectors", or(r.Connectors, "nixl"), []string{"nixl", "nixl-push"})
	if err != nil {
		return nil, err
	}
	n := 1
	for _, k := range []int{len(tps), len(dBlocks), len(pBlocks), len(minLayers), len(selectors), len(mnbts), len(dtypes), len(conns)} {
		n *= k
		if n > MaxCandidates {
			return nil, &RangeError{Flag: "the ranges", Value: describeCount(tps, dBlocks, pBlocks, minLayers, selectors, mnbts, dtypes, conns),
				Reason: fmt.Sprintf("more than %d candidates: narrow a range", MaxCandidates)}
		}
	}
	pl, err := plan.NewPlanner(s.Model)
	if err != nil {
		return nil, err
	}
	srch := &Search{space: s, conn: map[string]xfer.Connector{}, refused: map[string]*Refusal{}, planner: pl,
		plans: map[plan.Engine]planned{}, transfers: map[transferKey]transferred{}, pRegs: map[regKey][]*xfer.Registration{}, dRegs: map[uint64][]*xfer.Registration{}, inferred: map[string]bool{}}
	srch.connEng, srch.flagErrs = map[string]connEngines{}, map[flagKey]error{}
	for _, c := range conns {
		if srch.conn[c], err = xfer.ParseConnector(c); err != nil {
			return nil, &RangeError{Flag: "--connectors", Value: c, Reason: err.Error()}
		}
		// The connector's effect depends on the version and the model,
		// which every candidate shares: worked out once.
		pe, de, notes, err := xfer.ConnectorEngines(s.Model, srch.conn[c], s.P, s.D)
		srch.connEng[c] = connEngines{disableHybrid: pe.DisableHybrid != s.P.DisableHybrid || de.DisableHybrid != s.D.DisableHybrid, notes: notes, err: err}
	}
	if s.Shards > 1 && (s.Shard < 0 || s.Shard >= s.Shards) || s.Shards > 64 {
		return nil, fmt.Errorf("tune: shard %d of %d", s.Shard, s.Shards)
	}
	srch.candidates = make([]Candidate, 0, n)
	for _, tp := range tps {
		for _, pb := range pBlocks {
			for _, db := range dBlocks {
				for _, ml := range minLayers {
					for _, sel := range selectors {
						for _, mb := range mnbts {
							for _, dt := range dtypes {
								for _, cn := range conns {
									srch.candidates = append(srch.candidates, Candidate{Index: len(srch.candidates), TP: tp, PBlockSize: pb, DBlockSize: db,
										MinGroupLayers: ml, Selector: sel, MaxBatched: mb, KVCacheDType: dt, Connector: cn})
								}
							}
						}
					}
				}
			}
		}
	}
	srch.all = srch.candidates
	srch.candidates = srch.shardOf(srch.all)
	// Most candidates are usually accepted: room for them up front (a
	// bounded guess), not a slice grown and copied a dozen times.
	srch.feasible = make([]Scored, 0, min(len(srch.candidates), 1<<14))
	return srch, nil
}

func describeCount(tps []TPPair, lists ...any) string {
	parts := []string{fmt.Sprintf("%d TP pairs", len(tps))}
	names := []string{"D block sizes", "P block sizes", "min group layers", "selectors", "batched-token limits", "KV cache dtypes", "connectors"}
	for i, l := range lists {
		var n int
		switch v := l.(type) {
		case []int:
			n = len(v)
		case []string:
			n = len(v)
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, names[i]))
	}
	return strings.Join(parts, " x ")
}

// Candidates is the search's candidates, in order.
func (s *Search) Candidates() []Candidate { return s.candidates }

// Progress is how many candidates are evaluated, of how many.
func (s *Search) Progress() (done, total int) { return s.next, len(s.candidates) }

// Done reports whether every candidate is evaluated.
func (s *Search) Done() bool { return s.next == len(s.candidates) }

// Step evaluates up to n more candidates; it stops early when ctx ends
// (returning its error), before the next candidate or within one's
// transfer, leaving that candidate to the next Step.
func (s *Search) Step(ctx context.Context, n int) error {
	for end := min(s.next+n, len(s.candidates)); s.next < end; s.next++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !s.evaluate(ctx, s.candidates[s.next]) {
			return ctx.Err()
		}
	}
	return nil
}

// Run evaluates every candidate of a space and ranks them.
func Run(ctx context.Context, sp Space) (*Result, error) {
	s, err := NewSearch(sp)
	if err != nil {
		return nil, err
	}
	if err := s.Step(ctx, len(s.candidates)); err != nil {
		return nil, fmt.Errorf("tune: stopped after %d of %d candidates: %w", s.next, len(s.candidates), err)
	}
	return s.Result(), nil
}

// refuse counts a refused candidate under reason.
func (s *Search) refuse(reason, example string) {
	r := s.refused[reason]
	if r == nil {
		r = &Refusal{Reason: reason, Example: example, first: s.candidates[s.next].Index}
		s.refused[reason] = r
		s.order = append(s.order, reason)
	}
	r.Count++
}

// plan plans one engine; cache keeps the plan for the next candidate
// with the same engine (P's: a search holds few of them).
func (s *Search) plan(e plan.Engine, cache bool) (*plan.Plan, error) {
	if got, ok := s.plans[e]; ok {
		return got.p, got.err
	}
	var p *plan.Plan
	fk := flagKey{e.VLLMVersion, e.BlockSize}
	err, checked := s.flagErrs[fk]
	if !checked {
		err = e.CheckFlags()
		s.flagErrs[fk] = err
	}
	switch {
	case err != nil:
	case cache:
		p, err = s.planner.Plan(e)
	default:
		// D's plan lives until the next candidate's: planned into one
		// Plan, it allocates nothing.
		err = s.planner.PlanInto(e, &s.dPlan)
		p = &s.dPlan
	}
	if cache {
		s.plans[e] = planned{p, err}
	}
	return p, err
}

// evaluate plans a candidate's engines, checks the handshake and costs
// the request, keeping it or counting why not. It reports false when ctx
// ended in the candidate's transfer, which then counts for nothing.
func (s *Search) evaluate(ctx context.Context, c Candidate) bool {
	// Candidates come in runs of one TP pair and D block size (the inner
	// ranges vary the rest): the Planner forgets its ranks at each run, so
	// it holds the run's few, not every block size of the search (tens of
	// MB in a browser's heap, marked by every collection).
	if run := [3]int{c.TP.P, c.TP.D, c.DBlockSize}; run != s.plannerFor {
		s.planner.ForgetRanks()
		s.plannerFor = run
		for _, regs := range s.dRegs {
			s.spare = append(s.spare, regs)
		}
		clear(s.dRegs)
	}
	conn := s.conn[c.Connector]
	ce := s.connEng[c.Connector]
	if ce.err != nil {
		s.refuse("connector: "+c.Connector, ce.err.Error())
		return true
	}
	pe, de := s.Engines(c)
	notes := ce.notes
	pp, err := s.plan(pe, true)
	if err != nil {
		s.refuse(refusalOf("P", err), err.Error())
		return true
	}
	dp, err := s.plan(de, false)
	if err != nil {
		s.refuse(refusalOf("D", err), err.Error())
		return true
	}
	if pp.VLLMVersion != dp.VLLMVersion {
		s.refuse("P and D follow different vLLM versions", fmt.Sprintf("P %s, D %s", pp.VLLMVersion, dp.VLLMVersion))
		return true
	}
	req := s.space.Request
	if err := req.Check(pp, dp); err != nil {
		s.refuse("the request does not fit max_model_len", err.Error())
		return true
	}
	t := s.transfer(ctx, pp, dp, conn, c.Connector)
	switch {
	case t.stopped:
		return false
	case t.err != nil:
		s.refuse("the transfer cannot be computed", t.err.Error())
		return true
	case t.rejection != nil:
		s.refuse("handshake: "+t.rejection.Rule, t.rejection.Detail)
		return true
	}
	sc := Scored{Candidate: c, PBlock: pp.BlockSize, DBlock: dp.BlockSize, PGroups: pp.NumGroups, DGroups: dp.NumGroups,
		DKVTokens: dp.KVCacheTokens, PKVTokens: pp.KVCacheTokens, DConcurrency: dp.MaxConcurrency, Descs: t.descs,
		PaddingBytes: pp.PaddingBytesPerRequest + dp.PaddingBytesPerRequest, PagesDivide: xfer.PagesDivide(pp, dp), Path: t.path,
		Inferred: pp.Inferred || dp.Inferred || len(t.inferred) > 0, Notes: notes}
	for _, list := range [][]string{pp.InferredReasons, dp.InferredReasons, t.inferred} {
		for _, why := range list {
			s.inferred[why] = true
		}
	}
	s.feasible = append(s.feasible, sc)
	return true
}

// refusalOf names why vLLM refuses an engine: the flag at fault, or the
// planner's error with its numbers taken out (so refusals of one kind
// count together).
func refusalOf(side string, err error) string {
	var fe *plan.FlagError
	if errors.As(err, &fe) {
		return fmt.Sprintf("vLLM refuses %s's %s", side, fe.Flag)
	}
	msg := err.Error()
	if i := strings.IndexAny(msg, "0123456789"); i > 0 {
		msg = strings.TrimSpace(strings.TrimRight(msg[:i], " (:,"))
	}
	return fmt.Sprintf("vLLM refuses %s: %s", side, msg)
}

// transfer computes a request between two plans, once per distinct pair
// of plan geometries and connector.
func (s *Search) transfer(ctx context.Context, pp, dp *plan.Plan, conn xfer.Connector, name string) transferred {
	k := transferKey{s.signature(pp), s.signature(dp), name}
	if got, ok := s.transfers[k]; ok {
		return got
	}
	var out transferred
	pk := regKey{k.p, pp.NumBlocks}
	pRegs, ok := s.pRegs[pk]
	if !ok {
		pRegs, out.err = xfer.RegisterAll(s.space.Model, pp, xfer.P, "", nil)
		if out.err != nil {
			return out
		}
		s.pRegs[pk] = pRegs
	}
	dRegs, ok := s.dRegs[k.d]
	if !ok {
		var old []*xfer.Registration
		if n := len(s.spare); n > 0 {
			old, s.spare = s.spare[n-1], s.spare[:n-1]
		}
		if dRegs, out.err = xfer.RegisterAllInto(old, s.space.Model, dp, xfer.D, "", nil); out.err != nil {
			return out
		}
		s.dRegs[k.d] = dRegs
	}
	t, err := xfer.Compute(s.space.Model, pp, dp, s.space.Request, xfer.Options{Connector: conn, Output: xfer.CountPairs, PRegs: pRegs, DRegs: dRegs, Ctx: ctx})
	switch {
	case err != nil && ctx.Err() != nil:
		return transferred{stopped: true}
	case err != nil:
		out.err = err
	case t.Rejection != nil:
		out.rejection = t.Rejection
	default:
		out.descs, out.path, out.inferred = t.Descs, string(t.Path), t.Inferred
	}
	s.transfers[k] = out
	return out
}

// signature hashes what a plan's transfer geometry depends on, so that
// candidates whose flags differ but whose plans come out alike (a block
// size the alignment raises to the same size, a selector that picks the
// same groups, another batched-token limit) share one computed transfer:
// the version, the parallel sizes, the dtypes and backend, max_model_len,
// the planned block size, page and slots, and every group's kind, block
// size, page and layers. The number of blocks is left out: a request's
// descriptors do not depend on how many blocks the cache holds
// (TestRankingMatchesIndependentPlans computes every candidate's transfer
// afresh and compares). FNV-1a, 64 bits: a search keeps a hash per
// distinct plan, not the text.
func (s *Search) signature(p *plan.Plan) uint64 {
	e := p.Engine
	b := s.sig[:0]
	for _, str := range []string{p.VLLMVersion, e.KVCacheDType, e.MambaSSMCacheDType, e.MambaCacheMode, e.AttentionBackend} {
		b = append(append(b, str...), '|')
	}
	for _, n := range []int64{int64(e.TensorParallelSize), int64(e.PipelineParallelSize), int64(e.MaxModelLen), int64(p.BlockSize), p.PageBytes, int64(p.Slots)} {
		b = append(strconv.AppendInt(b, n, 10), '|')
	}
	b = strconv.AppendBool(b, e.DisableHybrid)
	for _, g := range p.Groups {
		b = append(append(b, '|'), g.Kind...)
		b = strconv.AppendInt(append(b, ':'), int64(g.BlockSize), 10)
		b = strconv.AppendInt(append(b, ':'), g.PageBytes, 10)
		for _, l := range g.Layers {
			b = append(append(b, ','), l...)
		}
	}
	s.sig = b
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// Result ranks what is evaluated so far. Its All shares the search's
// candidates (do not modify them); Top, Front and Dividing are copies.
func (s *Search) Result() *Result {
	r := &Result{Objective: s.space.Objective, Request: s.space.Request, Total: len(s.candidates) + s.merged.candidates,
		Evaluated: s.next + s.merged.evaluated, Feasible: len(s.feasible),
		Refused: []Refusal{}, Top: []Scored{}, Front: []Scored{}, Inferred: []string{}}
	for _, reason := range s.order {
		r.Refused = append(r.Refused, *s.refused[reason])
	}
	// The most frequent first; among equals, the one met first.
	sort.SliceStable(r.Refused, func(i, j int) bool {
		if r.Refused[i].Count != r.Refused[j].Count {
			return r.Refused[i].Count > r.Refused[j].Count
		}
		return r.Refused[i].first < r.Refused[j].first
	})
	for why := range s.inferred {
		r.Inferred = append(r.Inferred, why)
	}
	sort.Strings(r.Inferred)
	all := s.feasible
	s.space.Objective.score(all)
	r.All = all
	// Candidates are large: sort their indices.
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
		all[i].OnFront = false
	}
	for _, i := range paretoFront(all, idx) {
		all[i].OnFront = true
		r.Front = append(r.Front, all[i])
	}
	sort.SliceStable(idx, func(a, b int) bool { return better(&all[idx[a]], &all[idx[b]]) })
	for _, i := range idx[:min(len(idx), s.space.Top)] {
		r.Top = append(r.Top, all[i])
	}
	for _, i := range idx {
		if all[i].PagesDivide {
			d := all[i]
			r.Dividing = &d
			break
		}
	}
	for i := range r.Top {
		s.serveLines(&r.Top[i])
	}
	for i := range r.Front {
		s.serveLines(&r.Front[i])
	}
	if r.Dividing != nil {
		s.serveLines(r.Dividing)
	}
	return r
}

// better orders candidates: the higher score, then pages that divide,
// then fewer descriptors, then the earlier candidate.
func better(a, b *Scored) bool {
	switch {
	case a.Score != b.Score:
		return a.Score > b.Score
	case a.PagesDivide != b.PagesDivide:
		return a.PagesDivide
	case a.Descs != b.Descs:
		return a.Descs < b.Descs
	}
	return a.Index < b.Index
}

// paretoFront is the candidates no other beats on both D KV tokens (more)
// and descriptors per request (fewer), by KV tokens, most first; of equal
// points, the first candidate stands for them. It sorts idx (indices of
// all) and returns the front's indices.
func paretoFront(all []Scored, idx []int) []int {
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := &all[idx[a]], &all[idx[b]]
		if x.DKVTokens != y.DKVTokens {
			return x.DKVTokens > y.DKVTokens
		}
		if x.Descs != y.Descs {
			return x.Descs < y.Descs
		}
		return x.Index < y.Index
	})
	var front []int
	best := math.MaxInt
	for _, i := range idx {
		if all[i].Descs < best {
			front = append(front, i)
			best = all[i].Descs
		}
	}
	return front
}
