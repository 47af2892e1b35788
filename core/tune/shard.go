package tune

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// shardOf keeps the candidates of this search's shard: runs of one TP
// pair, P block size and D block size (the candidates a Planner serves
// together) go to the shards in turn.
func (s *Search) shardOf(all []Candidate) []Candidate {
	if s.space.Shards <= 1 {
		return all
	}
	var out []Candidate
	run := -1
	for i, c := range all {
		if i == 0 || c.TP != all[i-1].TP || c.PBlockSize != all[i-1].PBlockSize || c.DBlockSize != all[i-1].DBlockSize {
			run++
		}
		if run%s.space.Shards == s.space.Shard {
			out = append(out, c)
		}
	}
	return out
}

// partialMagic starts a Partial's encoding (and names its version).
const partialMagic = "kvscope-tune-partial-1"

// partialRecord is the size of one accepted candidate in a Partial: five
// 32-bit counts, four 64-bit figures, a flags byte and the descriptors.
const partialRecord = 4*5 + 8*4 + 1 + 4

// Partial encodes what this search evaluated, for Merge into another
// search of the same space: how many candidates it has and evaluated, the
// accepted ones' figures (a candidate is sent as its index: its flags,
// vllm serve lines and notes are the receiver's to rebuild), the refusals
// and the inferred reasons.
func (s *Search) Partial() []byte {
	head := struct {
		Candidates int       `json:"candidates"`
		Evaluated  int       `json:"evaluated"`
		Refused    []refusal `json:"refused"`
		Inferred   []string  `json:"inferred"`
	}{Candidates: len(s.candidates), Evaluated: s.next, Refused: []refusal{}, Inferred: []string{}}
	for _, reason := range s.order {
		r := s.refused[reason]
		head.Refused = append(head.Refused, refusal{r.Reason, r.Count, r.Example, r.first})
	}
	for why := range s.inferred {
		head.Inferred = append(head.Inferred, why)
	}
	sort.Strings(head.Inferred)
	js, _ := json.Marshal(head) // strings and ints only
	b := make([]byte, 0, len(partialMagic)+8+len(js)+len(s.feasible)*partialRecord)
	b = append(b, partialMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.feasible)))
	for i := range s.feasible {
		x := &s.feasible[i]
		for _, v := range []int{x.Index, x.PBlock, x.DBlock, x.PGroups, x.DGroups} {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		for _, v := range []uint64{uint64(x.DKVTokens), uint64(x.PKVTokens), math.Float64bits(x.DConcurrency), uint64(x.PaddingBytes)} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		var flags byte
		if x.PagesDivide {
			flags |= 1
		}
		if x.Inferred {
			flags |= 2
		}
		if x.Path == "group-pairs" {
			flags |= 4
		}
		b = append(b, flags)
		b = binary.LittleEndian.AppendUint32(b, uint32(x.Descs))
	}
	return b
}

// refusal is a Refusal as a Partial carries it.
type refusal struct {
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
	Example string `json:"example"`
	First   int    `json:"first"`
}

// Merge adds another shard's Partial of the same space: its counts, its
// accepted candidates (in candidate order with this search's), its
// refusals (an example is the first refused candidate's of all shards) and
// its inferred reasons. Result then ranks them together as one search
// would. A Partial that is not one, or names candidates the space does not
// have, is refused whole.
func (s *Search) Merge(b []byte) error {
	bad := func(what string) error { return fmt.Errorf("tune: a shard's partial result: %s", what) }
	if len(b) < len(partialMagic)+4 || string(b[:len(partialMagic)]) != partialMagic {
		return bad("not one (no header)")
	}
	b = b[len(partialMagic):]
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b) {
		return bad("the header runs past the end")
	}
	var head struct {
		Candidates int       `json:"candidates"`
		Evaluated  int       `json:"evaluated"`
		Refused    []refusal `json:"refused"`
		Inferred   []string  `json:"inferred"`
	}
	if err := json.Unmarshal(b[:n], &head); err != nil {
		return bad(err.Error())
	}
	b = b[n:]
	if len(b) < 4 {
		return bad("no accepted candidates' count")
	}
	count := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if count < 0 || count > len(s.all) || len(b) != count*partialRecord {
		return bad(fmt.Sprintf("%d accepted candidates in %d bytes", count, len(b)))
	}
	if head.Candidates < 0 || head.Evaluated < 0 || head.Evaluated > head.Candidates || len(s.candidates)+s.merged.candidates+head.Candidates > len(s.all) {
		return bad(fmt.Sprintf("%d of %d candidates evaluated, beside %d of a space of %d", head.Evaluated, head.Candidates, len(s.candidates)+s.merged.candidates, len(s.all)))
	}
	feasible := make([]Scored, 0, count)
	for i := 0; i < count; i++ {
		rec := b[i*partialRecord:]
		u32 := func(k int) int { return int(binary.LittleEndian.Uint32(rec[4*k:])) }
		u64 := func(k int) uint64 { return binary.LittleEndian.Uint64(rec[20+8*k:]) }
		idx := u32(0)
		if idx >= len(s.all) {
			return bad(fmt.Sprintf("candidate %d of a space of %d", idx, len(s.all)))
		}
		c := s.all[idx]
		flags := rec[52]
		x := Scored{Candidate: c, PBlock: u32(1), DBlock: u32(2), PGroups: u32(3), DGroups: u32(4),
			DKVTokens: int64(u64(0)), PKVTokens: int64(u64(1)), DConcurrency: math.Float64frombits(u64(2)), PaddingBytes: int64(u64(3)),
			PagesDivide: flags&1 != 0, Inferred: flags&2 != 0, Path: "vllm", Descs: int(binary.LittleEndian.Uint32(rec[53:])),
			Notes: s.connEng[c.Connector].notes}
		if flags&4 != 0 {
			x.Path = "group-pairs"
		}
		feasible = append(feasible, x)
	}
	s.feasible = append(s.feasible, feasible...)
	sort.SliceStable(s.feasible, func(i, j int) bool { return s.feasible[i].Index < s.feasible[j].Index })
	for _, x := range head.Refused {
		r := s.refused[x.Reason]
		switch {
		case r == nil:
			s.refused[x.Reason] = &Refusal{Reason: x.Reason, Count: x.Count, Example: x.Example, first: x.First}
			s.order = append(s.order, x.Reason)
		default:
			r.Count += x.Count
			if x.First < r.first {
				r.Example, r.first = x.Example, x.First
			}
		}
	}
	for _, why := range head.Inferred {
		s.inferred[why] = true
	}
	s.merged.candidates += head.Candidates
	s.merged.evaluated += head.Evaluated
	return nil
}
