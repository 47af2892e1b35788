package xfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
)

// vllmMapping is NixlConnector's model-wide TP mapping for one D rank
// (TransferTopology / _compute_tp_mapping): which P ranks it reads, at
// which head slot of the P page, in how many reads. It is computed from the
// model's total KV heads, the same for every layer.
type vllmMapping struct {
	TPRatio    int   // D/P when D >= P, else -(P/D)
	Ranks      []int // P ranks read (attention)
	Factor     int   // rank_offset_factor: head slot in the P page
	NumReads   int
	Replicated bool // P TP > KV heads (remote replication)
	MLA        bool
}

// TPRatio is vLLM's tp_ratio: D/P when D >= P, else -(P/D); 0 when neither
// divides the other.
func TPRatio(pTP, dTP int) int {
	switch {
	case dTP >= pTP && dTP%pTP == 0:
		return dTP / pTP
	case pTP > dTP && pTP%dTP == 0:
		return -(pTP / dTP)
	}
	return 0
}

func newVLLMMapping(kvHeads, pTP, dTP, j int, mla bool) vllmMapping {
	m := vllmMapping{TPRatio: TPRatio(pTP, dTP), MLA: mla, Replicated: pTP > kvHeads}
	switch {
	case m.TPRatio > 0:
		m.Ranks = []int{j / m.TPRatio}
	case mla:
		m.Ranks = []int{j * -m.TPRatio} // read once, notify the others
	default:
		k := -m.TPRatio
		seen := map[int]bool{}
		for r := j * k; r < j*k+k; r++ {
			head := r * kvHeads / pTP
			if seen[head] {
				continue
			}
			seen[head] = true
			m.Ranks = append(m.Ranks, r)
		}
	}
	m.NumReads = len(m.Ranks)
	switch {
	case mla || dTP <= pTP:
		m.Factor = 0
	case dTP > kvHeads:
		m.Factor = j*kvHeads/dTP - m.Ranks[0]*kvHeads/pTP
	default:
		m.Factor = j % m.TPRatio
	}
	return m
}

// piece is where one P rank's bytes of one segment land in D's block:
// Len bytes from offset Src of P's segment to offset Dst of D's segment.
type piece struct {
	Rank     int
	Src, Dst int64
	Len      int64
}

// indexRun is a run of D's global indices that one P rank supplies.
type indexRun struct {
	Rank   int
	Lo, Hi int
}

// indexRuns splits D's index range into runs by the P rank that holds them
// (the one vLLM's rank choice would pick where several replicas do).
func indexRuns(dSeg Segment, pSegs func(rank int) Segment, pTP, dTP, j int) ([]indexRun, error) {
	return appendIndexRuns(nil, dSeg, pSegs, pTP, dTP, j)
}

// appendIndexRuns is indexRuns appending to out, so that a caller walking
// every layer reuses one slice.
func appendIndexRuns(out []indexRun, dSeg Segment, pSegs func(rank int) Segment, pTP, dTP, j int) ([]indexRun, error) {
	for idx := dSeg.Lo; idx < dSeg.Hi; {
		r, err := holder(idx, pSegs, pTP, dTP, j)
		if err != nil {
			return nil, err
		}
		end := min(dSeg.Hi, pSegs(r).Hi)
		out = append(out, indexRun{Rank: r, Lo: idx, Hi: end})
		idx = end
	}
	return out, nil
}

// truePieces is the correct geometry of one segment for one D rank, in
// whole index slabs as vLLM's descriptors move them.
func truePieces(dSeg Segment, pSegs func(rank int) Segment, pTP, dTP, j int) ([]piece, error) {
	runs, err := indexRuns(dSeg, pSegs, pTP, dTP, j)
	if err != nil {
		return nil, err
	}
	var out []piece
	for _, r := range runs {
		ps := pSegs(r.Rank)
		if ps.IndexBytes != dSeg.IndexBytes {
			return nil, fmt.Errorf("%s index sizes differ: P %d B, D %d B", dSeg.Name, ps.IndexBytes, dSeg.IndexBytes)
		}
		out = append(out, piece{Rank: r.Rank, Src: int64(r.Lo-ps.Lo) * ps.IndexBytes, Dst: int64(r.Lo-dSeg.Lo) * dSeg.IndexBytes, Len: int64(r.Hi-r.Lo) * dSeg.IndexBytes})
	}
	return out, nil
}

// holder is the P rank a D rank takes index idx from: the rank vLLM's
// mapping names first (j*P/D) when it holds idx, else the first that does.
func holder(idx int, pSegs func(rank int) Segment, pTP, dTP, j int) (int, error) {
	pref := j * pTP / dTP
	if s := pSegs(pref); s.Lo <= idx && idx < s.Hi {
		return pref, nil
	}
	for r := 0; r < pTP; r++ {
		if s := pSegs(r); s.Lo <= idx && idx < s.Hi {
			return r, nil
		}
	}
	return 0, fmt.Errorf("no P rank holds index %d", idx)
}

// vllmPieces is what vLLM's model-wide mapping moves for one segment of one
// D rank: D >= P reads desc_len = D's segment bytes / reads at
// rank_offset_factor * D's bytes in the P page; P > D reads each source
// rank's whole segment into slot s of D's.
func vllmPieces(mp vllmMapping, dSeg Segment) []piece {
	dBytes := dSeg.Bytes()
	var out []piece
	for s, r := range mp.Ranks {
		switch {
		case mp.TPRatio > 0 || mp.MLA:
			out = append(out, piece{Rank: r, Src: int64(mp.Factor) * dBytes, Dst: 0, Len: dBytes / int64(mp.NumReads)})
		default:
			n := int64(mp.NumReads)
			out = append(out, piece{Rank: r, Src: 0, Dst: int64(s) * dBytes / n, Len: dBytes / n})
		}
	}
	return out
}

// stateMapping is the position-based mapping vLLM uses for Mamba/GDN
// state with heterogeneous TP (PR #36957, as kvscope reads it): D >= P
// takes slot j%ratio of P rank j/ratio; P > D takes all k ranks in order.
func stateMapping(pTP, dTP, j int) vllmMapping {
	m := vllmMapping{TPRatio: TPRatio(pTP, dTP)}
	if m.TPRatio > 0 {
		m.Ranks = []int{j / m.TPRatio}
		m.Factor = j % m.TPRatio
	} else {
		k := -m.TPRatio
		for r := j * k; r < j*k+k; r++ {
			m.Ranks = append(m.Ranks, r)
		}
	}
	m.NumReads = len(m.Ranks)
	return m
}

// modelKVHeads is the model-wide KV head count vLLM maps with: the target's
// first attention layer's (1 for MLA).
func modelKVHeads(m *model.Model) (int, bool) {
	l, ok := m.TargetAttention()
	if !ok {
		return 0, false
	}
	if l.Kind == model.MLA {
		return 1, true
	}
	return l.KVHeads, true
}
