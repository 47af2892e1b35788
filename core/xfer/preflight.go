package xfer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// This file is the P/D preflight: what each engine brings to the
// handshake, side by side, and the answer in one sentence. The values are
// the ones vLLM's NixlConnector hashes into the compatibility hash or
// validates when D adds P as a remote agent; the handshake's checks
// (newHandshake, checkConnectorRules) decide; the preflight explains.

// Facts is what one engine brings to a P/D handshake: as kvscope plans it,
// or as a running engine advertises it on its side channel (where a value
// is not advertised it is empty, or 0).
type Facts struct {
	Side        Side   `json:"side"`
	VLLMVersion string `json:"vllm_version,omitempty"`
	// Handshake is the NIXL_CONNECTOR_VERSION the engine speaks (0: none,
	// or not known).
	Handshake  int    `json:"nixl_connector_version"`
	CompatHash string `json:"compatibility_hash,omitempty"`
	TP         int    `json:"tp_size"`
	BlockSize  int    `json:"block_size"`
	NumBlocks  int64  `json:"num_blocks"`
	Regions    int    `json:"regions"`
	// HybridManager is "on", "off (the connector turns it off)", "off
	// (--disable-hybrid-kv-cache-manager)", "one kind of layer" or ""
	// (not advertised).
	HybridManager string `json:"hybrid_manager,omitempty"`
	KVTokens      int64  `json:"kv_cache_tokens,omitempty"`
	// MaxConcurrency is how many requests of max-model-len tokens the KV
	// cache holds at once.
	MaxConcurrency float64 `json:"max_concurrency,omitempty"`
	MaxModelLen    int     `json:"max_model_len,omitempty"`
	// HybridKVTokens and HybridMaxConcurrency are the capacity the same
	// engine would have with the hybrid manager on, when a connector turns
	// it off (0 otherwise). Before vLLM 0.21 the logged KV cache tokens
	// are the same either way (num_blocks // groups * block size): the
	// concurrency says what the connector costs.
	HybridKVTokens       int64   `json:"kv_cache_tokens_with_hybrid_manager,omitempty"`
	HybridMaxConcurrency float64 `json:"max_concurrency_with_hybrid_manager,omitempty"`
	KVCacheLayout        string  `json:"kv_cache_layout,omitempty"` // HND or NHD
	BlocksFirst          bool    `json:"blocks_first"`
	// StateLayout is one state layer's conv and SSM bytes on a rank and
	// the Mamba cache mode ("" for a model without state layers).
	StateLayout  string `json:"state_layout,omitempty"`
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	Backend      string `json:"attn_backend,omitempty"`
	// Observed: the facts are a running engine's (Observed.Facts), not
	// kvscope's plan. Its Handshake is then a lower bound, implied by the
	// members it sent, and Releases the profiled vLLM releases that send
	// that version; its compatibility hash is vLLM's own.
	Observed bool     `json:"observed,omitempty"`
	Releases []string `json:"releases,omitempty"`
}

// How vLLM's NixlConnector treats a value that differs between P and D.
const (
	// Hashed values go into the compatibility hash: any difference refuses
	// the handshake.
	Hashed = "hashed"
	// Validated values may differ within what the release's connector
	// accepts (TP sizes that divide, block sizes it maps, layouts).
	Validated = "validated"
	// Free values are each engine's own (capacity, block counts).
	Free = "free"
)

// Facet is one value of the handshake, on P and on D.
type Facet struct {
	Name string `json:"name"`
	P    string `json:"p"`
	D    string `json:"d"`
	Same bool   `json:"same"`
	// Rule is how vLLM treats a difference: Hashed, Validated or Free.
	Rule string `json:"rule"`
	Note string `json:"note,omitempty"`
}

// Preflight is the answer to "will P and D transfer, and why not".
type Preflight struct {
	// Verdict is "ok", "rejected" or "no-transfer" (a connector that
	// moves nothing between P and D).
	Verdict string `json:"verdict"`
	// Sentence says the verdict in one sentence: what a request moves per
	// rank pair, or the first refusal, when vLLM raises it and the fix.
	Sentence  string     `json:"sentence"`
	P         Facts      `json:"p"`
	D         Facts      `json:"d"`
	Facets    []Facet    `json:"facets"`
	Rejection *Rejection `json:"rejection,omitempty"`
	// Descs and Bytes are the largest any rank pair moves for the request
	// (0 when rejected).
	Descs int   `json:"descs_per_rank_pair,omitempty"`
	Bytes int64 `json:"bytes_per_rank_pair,omitempty"`
	// RankPairs is how many rank pairs the request uses.
	RankPairs int `json:"rank_pairs,omitempty"`
}

// WhenRefused says when vLLM raises a handshake refusal: D handshakes with
// P in a background thread when the first request that names P's engine
// arrives (vLLM's NixlConnector, _nixl_handshake), and validates P's
// metadata as it adds P as a remote agent. Both engines start and report
// healthy before that.
const WhenRefused = "at the first request, when D handshakes with P (both engines start and report healthy before that)"

// WhenAtStartup says when vLLM refuses a connector its release does not
// have for the model: as the engine starts with the --kv-transfer-config
// (inferred: the engines' start-up with such a config was not read).
const WhenAtStartup = "at start-up, when the engine is given the --kv-transfer-config (inferred)"

// StartupError is a refusal of the connector itself, before any plan:
// the release has no such connector, or its connector cannot serve the
// model. Its Rejection says which, and the fix.
type StartupError struct {
	Flag string // the flag it is about: "--connector nixl"
	Rejection
}

func (e *StartupError) Error() string { return "xfer: " + e.Flag + ": " + e.Detail }

// PreflightOfStartup answers for a deployment whose engines refuse the
// connector at start-up: nothing is planned.
func PreflightOfStartup(e *StartupError, p, d plan.Engine) *Preflight {
	who := func(side Side, eng plan.Engine) string {
		return fmt.Sprintf("%s (vLLM %s, TP %d)", side, eng.VLLMVersion, max(1, eng.TensorParallelSize))
	}
	rej := e.Rejection
	return &Preflight{Verdict: "rejected", Rejection: &rej, Facets: []Facet{}, P: Facts{Side: P, VLLMVersion: p.VLLMVersion}, D: Facts{Side: D, VLLMVersion: d.VLLMVersion},
		Sentence: fmt.Sprintf("%s and %s will not transfer: %s (rule %s). vLLM refuses it %s. Fix: %s.", who(P, p), who(D, d), rej.Detail, rej.Rule, rej.When, rej.Fix)}
}

// FactsOf is what one side of the prepared deployment brings to the
// handshake, as kvscope plans it.
func (r *PD) FactsOf(side Side) Facts {
	pp, dp := r.UsedPlans()
	p, regs, i := pp, r.pRegs, 0
	if side == D {
		p, regs, i = dp, r.dRegs, 1
	}
	m := r.setup.Model
	f := Facts{Side: side, VLLMVersion: p.VLLMVersion, TP: p.Engine.TensorParallelSize, BlockSize: p.BlockSize, NumBlocks: p.NumBlocks,
		KVTokens: p.KVCacheTokens, MaxConcurrency: p.MaxConcurrency, MaxModelLen: p.Engine.MaxModelLen, KVCacheDType: p.Engine.KVCacheDType, Backend: p.Backend, KVCacheLayout: "HND"}
	if f.KVCacheDType == "" {
		f.KVCacheDType = "auto"
	}
	if r.handshake != nil {
		f.Handshake = r.handshake.Protocol.Version
		mds := r.handshake.P
		if side == D {
			mds = r.handshake.D
		}
		if len(mds) > 0 {
			md := mds[0]
			f.CompatHash, f.KVCacheLayout, f.BlocksFirst, f.Regions = md.CompatHash, md.KVCacheLayout, md.BlocksFirst, len(md.BaseAddrs)
			if md.SSMSizes != [2]int64{} {
				f.StateLayout = fmt.Sprintf("conv %s + ssm %s B/layer", plan.Commas(md.SSMSizes[0]), plan.Commas(md.SSMSizes[1]))
			}
		}
	} else if len(regs) > 0 {
		f.Regions = len(regs[0].Regions)
	}
	if f.StateLayout != "" || hasState(m) {
		mode := p.Engine.MambaCacheMode
		if mode == "" {
			mode = "none"
		}
		f.StateLayout = strings.TrimPrefix(f.StateLayout+", mamba_cache_mode "+mode, ", ")
	}
	switch {
	case !manyKinds(m):
		f.HybridManager = "one kind of layer"
	case r.hybridOff[i]:
		f.HybridManager = "off (the connector turns it off)"
		if hp, err := plan.New(m, r.hybridEngine(side)); err == nil {
			f.HybridKVTokens, f.HybridMaxConcurrency = hp.KVCacheTokens, hp.MaxConcurrency
		}
	case p.Engine.DisableHybrid:
		f.HybridManager = "off (--disable-hybrid-kv-cache-manager)"
	default:
		f.HybridManager = "on"
	}
	return f
}

// hybridEngine is a side's engine as given, before the connector turned
// the hybrid manager off.
func (r *PD) hybridEngine(side Side) plan.Engine {
	e := r.setup.P
	if side == D {
		e = r.setup.D
	}
	e.DisableHybrid = false
	return e
}

func hasState(m *model.Model) bool {
	for _, l := range m.Layers {
		if l.Kind.IsState() {
			return true
		}
	}
	return false
}

// manyKinds reports whether the model has more than one kind of layer
// that owns KV: what the hybrid KV cache manager is for.
func manyKinds(m *model.Model) bool {
	kinds := map[model.Kind]bool{}
	for _, l := range m.Layers {
		if l.OwnsKV() {
			kinds[l.Kind] = true
		}
	}
	return len(kinds) > 1
}

// CompareFacts lists the handshake's values side by side, with how vLLM
// treats a difference. A value neither side knows is left out.
func CompareFacts(p, d Facts) []Facet {
	var out []Facet
	add := func(name, pv, dv, rule, note string) {
		if pv == "" && dv == "" {
			return
		}
		out = append(out, Facet{Name: name, P: orUnknown(pv), D: orUnknown(dv), Same: pv == dv, Rule: rule, Note: note})
	}
	num := func(n int64) string {
		if n == 0 {
			return ""
		}
		return plan.Commas(n)
	}
	add("vLLM version", p.VLLMVersion, d.VLLMVersion, Hashed, "the compatibility hash takes the version")
	hashNote := "kvscope's stand-in digest of the inputs the version hashes"
	if p.Observed || d.Observed {
		hashNote = "the engines' own"
	}
	add("NIXL_CONNECTOR_VERSION", handshakeText(p), handshakeText(d), Hashed, "")
	add("compatibility hash", p.CompatHash, d.CompatHash, Hashed, hashNote)
	tpNote := ""
	if p.TP > 0 && d.TP > 0 {
		if ratio := TPRatio(p.TP, d.TP); ratio != 0 {
			tpNote = fmt.Sprintf("tp_ratio %d", ratio)
		} else {
			tpNote = "neither divides the other"
		}
	}
	add("tensor-parallel size", num(int64(p.TP)), num(int64(d.TP)), Validated, tpNote)
	bsNote := ""
	if p.BlockSize > 0 && d.BlockSize > 0 && p.BlockSize != d.BlockSize {
		if d.BlockSize%p.BlockSize == 0 {
			bsNote = fmt.Sprintf("D's block is %d× P's", d.BlockSize/p.BlockSize)
		} else if p.BlockSize%d.BlockSize == 0 {
			bsNote = fmt.Sprintf("P's block is %d× D's", p.BlockSize/d.BlockSize)
		} else {
			bsNote = "neither divides the other"
		}
	}
	add("block size (tokens)", num(int64(p.BlockSize)), num(int64(d.BlockSize)), Validated, bsNote)
	add("hybrid KV cache manager", p.HybridManager, d.HybridManager, Hashed, hybridNote(p, d))
	add("KV cache tokens", num(p.KVTokens), num(d.KVTokens), Free, "")
	add("num_blocks", num(p.NumBlocks), num(d.NumBlocks), Free, "")
	add("regions per rank", num(int64(p.Regions)), num(int64(d.Regions)), Free, "")
	layout := func(f Facts) string {
		if f.KVCacheLayout == "" || f.Observed {
			return f.KVCacheLayout // the side channel does not say blocks-first
		}
		if f.BlocksFirst {
			return f.KVCacheLayout + ", blocks first"
		}
		return f.KVCacheLayout + ", K/V split"
	}
	add("KV cache layout", layout(p), layout(d), Validated, "")
	stateNote := ""
	if p.TP != d.TP {
		stateNote = "per-rank state bytes scale with TP"
	}
	add("state layout", p.StateLayout, d.StateLayout, Validated, stateNote)
	add("KV cache dtype", p.KVCacheDType, d.KVCacheDType, Hashed, "")
	add("attention backend", p.Backend, d.Backend, Hashed, "")
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "not known"
	}
	return s
}

func hybridNote(p, d Facts) string {
	var parts []string
	for _, f := range []Facts{p, d} {
		if f.HybridMaxConcurrency > 0 && f.MaxConcurrency > 0 {
			parts = append(parts, fmt.Sprintf("%s holds %.2f requests of %s tokens at once against %.2f with it on (%+.1f%%; KV cache tokens %s against %s)", f.Side,
				f.MaxConcurrency, plan.Commas(int64(f.MaxModelLen)), f.HybridMaxConcurrency, 100*(f.MaxConcurrency-f.HybridMaxConcurrency)/f.HybridMaxConcurrency,
				plan.Commas(f.KVTokens), plan.Commas(f.HybridKVTokens)))
		}
	}
	return strings.Join(parts, "; ")
}

// PreflightOf answers for the prepared deployment and a computed
// transfer (nil when the connector moves nothing between P and D).
func (r *PD) PreflightOf(t *Transfer) *Preflight {
	pf := &Preflight{P: r.FactsOf(P), D: r.FactsOf(D)}
	pf.Facets = CompareFacts(pf.P, pf.D)
	who := func(f Facts) string {
		return fmt.Sprintf("%s (vLLM %s, TP %d, block %d)", f.Side, f.VLLMVersion, f.TP, f.BlockSize)
	}
	pair := who(pf.P) + " and " + who(pf.D)
	switch {
	case t == nil:
		pf.Verdict = "no-transfer"
		pf.Sentence = pair + " move nothing between them: " + r.Note
	case t.Rejection != nil:
		rej := t.Rejection
		pf.Verdict, pf.Rejection = "rejected", rej
		s := fmt.Sprintf("%s will not transfer: %s (rule %s, %s). vLLM refuses it %s", pair, rej.Detail, rej.Rule, rej.Side, rej.When)
		if rej.VLLMError != "" {
			s += fmt.Sprintf(", with %q", rej.VLLMError)
		}
		pf.Sentence = s + ". Fix: " + rej.Fix + "."
	default:
		pf.Verdict, pf.RankPairs = "ok", len(t.RankPairs)
		for _, rp := range t.RankPairs {
			pf.Descs, pf.Bytes = max(pf.Descs, rp.Descs), max(pf.Bytes, rp.Bytes)
		}
		path := "vLLM's own path"
		if t.Path != VLLMPath {
			path = "kvscope's group-pair path"
		}
		pairs := "1 rank pair"
		if pf.RankPairs != 1 {
			pairs = strconv.Itoa(pf.RankPairs) + " rank pairs"
		}
		pf.Sentence = fmt.Sprintf("%s will transfer: a %s-token prompt moves at most %s descriptors and %s bytes per rank pair (%s, %s) on %s.",
			pair, plan.Commas(int64(t.Request.PromptTokens)), plan.Commas(int64(pf.Descs)), plan.Commas(pf.Bytes), pairs, t.Mode, path)
		if !r.Advice.Divide {
			pf.Sentence += " " + r.Advice.Log
		}
		if note := hybridNote(pf.P, pf.D); note != "" {
			pf.Sentence += " The connector turns the hybrid KV cache manager off: " + note + "."
		}
	}
	return pf
}
