package xfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Request is one prompt moving from P to D.
type Request struct {
	PromptTokens    int `json:"prompt_tokens"`     // N
	PrefixHitTokens int `json:"prefix_hit_tokens"` // H: tokens D already holds in its prefix cache
}

// Span is a half-open token range [Lo, Hi).
type Span struct{ Lo, Hi int }

// Len is the number of tokens in the span.
func (s Span) Len() int { return max(0, s.Hi-s.Lo) }

// Contains reports whether o lies inside s.
func (s Span) Contains(o Span) bool { return o.Len() == 0 || s.Lo <= o.Lo && o.Hi <= s.Hi }

// tokensComputedByP is how many prompt tokens P prefills: all N for
// attention models; N-1 with Mamba/GDN layers, whose final state must be
// h(N-1) so that D can recompute the last token (vLLM's
// _truncate_mamba_request_for_prefill).
func tokensComputedByP(p *plan.Plan, n int) int {
	for _, l := range p.Layers {
		if l.Kind.IsState() {
			return n - 1
		}
	}
	return n
}

// effectiveHit aligns D's prefix hit as vLLM's hybrid coordinator does: a
// whole number of blocks of every attention group (their lcm), at most N-1
// tokens, and none when D keeps Mamba/GDN state without prefix caching
// (mamba_cache_mode none).
func effectiveHit(d *plan.Plan, req Request) (int, string) {
	h := req.PrefixHitTokens
	if h <= 0 {
		return 0, ""
	}
	unit := 1
	for _, g := range d.Groups {
		if g.Kind.IsState() {
			if d.Engine.MambaCacheMode == "none" || d.Engine.MambaCacheMode == "" {
				return 0, "D keeps Mamba/GDN state with mamba_cache_mode none, which has no prefix caching: the prefix hit is 0"
			}
			continue
		}
		unit = lcm(unit, g.BlockSize)
	}
	aligned := min(h, req.PromptTokens-1) / unit * unit
	if aligned != h {
		return aligned, fmt.Sprintf("prefix hit of %d tokens aligned down to %d (whole blocks of every group, at most N-1)", h, aligned)
	}
	return aligned, ""
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b int) int { return a / gcd(a, b) * b }

// Need is the token range D must receive for a layer of D's kind: every
// prompt token but the last (D recomputes it), from the prefix hit on;
// sliding-window and chunked layers only what the last token attends to.
func Need(kind model.Kind, window, chunk, n, hit int) Span {
	last := n - 1 // D recomputes token n-1
	s := Span{Lo: hit, Hi: last}
	switch kind {
	case model.Sliding:
		s.Lo = max(s.Lo, last-(window-1))
	case model.ChunkedLocal:
		s.Lo = max(s.Lo, last/chunk*chunk)
	}
	if s.Hi < s.Lo {
		s.Hi = s.Lo
	}
	return s
}

// keptByP is the token range P still holds for a layer of P's kind after
// prefilling computed tokens: full attention keeps everything; a sliding
// window keeps its last ceil(W/block)+1 pages (vLLM's clip); chunked local
// attention keeps the pages from the last token's chunk on.
func keptByP(kind model.Kind, window, chunk, blockSize, computed int) Span {
	pages := ceilDiv(computed, blockSize)
	switch kind {
	case model.Sliding:
		keep := ceilDiv(window, blockSize) + 1
		return Span{Lo: max(0, pages-keep) * blockSize, Hi: computed}
	case model.ChunkedLocal:
		start := (computed - 1) / chunk * chunk
		return Span{Lo: start / blockSize * blockSize, Hi: computed}
	}
	return Span{Lo: 0, Hi: computed}
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Pages is one group's allocated pages on one side: page index First+i
// lives in block IDs[i].
type Pages struct {
	BlockSize int   `json:"block_size"`
	First     int   `json:"first_page"`
	IDs       []int `json:"block_ids"`
}

// Block returns the block id of a page.
func (p Pages) Block(page int) (int, bool) {
	i := page - p.First
	if i < 0 || i >= len(p.IDs) {
		return 0, false
	}
	return p.IDs[i], true
}

// allocator hands out block ids from one pool, skipping the null block 0.
type allocator struct{ next int }

func (a *allocator) take(n int) []int {
	if a.next == 0 {
		a.next = 1
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = a.next
		a.next++
	}
	return ids
}
