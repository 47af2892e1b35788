package plan

import (
	"fmt"
	"strconv"

	"github.com/kvscope/kvscope/core/kvspec"
)

// This file writes a call's figures out as a Plan: its groups and layers,
// stages, log lines, warnings, notes and inferred reasons, in arrays a
// reused Plan already holds where they are large enough.

// reuse returns s resized to n and zeroed, in s's array when it is large
// enough.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// plan builds the Plan of the call's figures into p, reusing p's arrays
// (a plan PlanInto wrote before) where they are large enough.
func (c *call) plan(p *Plan) {
	pl, r, e, prof, s := c.pl, c.r, &c.e, c.prof, &c.sum
	sp := pl.split(r, c.g)
	oldStrs, oldGroups, oldLayers, oldStages, oldAlign, oldBuckets := p.strs, p.Groups, p.Layers, p.Stages, p.Alignment, p.Buckets
	*p = Plan{
		Model: pl.m.Name, Engine: c.e, VLLMVersion: prof.Name, VLLMProfile: prof.Label, Profile: *prof,
		BlockSize: s.BlockSize, PageBytes: s.PageBytes, BytesPerBlock: s.BytesPerBlock,
		NumGroups: s.NumGroups, GroupSize: s.GroupSize, Slots: s.Slots, PaddingSlots: s.PaddingSlots,
		PaddingBytesPerRequest: s.PaddingBytesPerRequest,
		NumBlocks:              s.NumBlocks, BlocksPerRequest: s.BlocksPerRequest, MaxConcurrency: s.MaxConcurrency,
		KVCacheTokens: s.KVCacheTokens, KVCacheTokensRule: c.tokensRule, CapacityTokens: s.CapacityTokens,
		Selector: s.Selector, Merge: s.Merge, Dispatch: s.Dispatch,
		Backend:    r.rank.Backend.Name,
		layerIndex: sp.index,
	}
	if a := r.rank.Alignment; a != nil {
		if oldAlign == nil {
			oldAlign = new(kvspec.Alignment)
		}
		*oldAlign = *a
		p.Alignment = oldAlign
	}
	// Every string slice of the plan in one array: the groups' layer
	// names, then room for the logs, the notes, the warnings and the
	// inferred reasons, each capped so that appending to one cannot
	// overwrite the next.
	var engineNotes []string
	if !pl.fromSpecs {
		engineNotes = c.notes.render(prof)
	}
	nlogs := len(r.logs) + 3
	nnotes := len(pl.m.Notes) + len(engineNotes) + len(r.rank.Notes)
	nreasons := len(r.loose) + len(r.profile) + 4
	strs := reuse(oldStrs, len(r.specs)+nlogs+nnotes+len(sp.warnings)+nreasons)
	p.strs = strs
	names, rest := strs[:len(r.specs)], strs[len(r.specs):]
	carve := func(n int) []string {
		out := rest[:0:n]
		rest = rest[n:]
		return out
	}
	p.Logs, p.Notes, p.Warnings, p.InferredReasons = carve(nlogs), carve(nnotes), carve(len(sp.warnings)), carve(nreasons)

	uniformType := r.dispatch == "uniform-type"
	p.Groups = reuse(oldGroups, s.NumGroups)
	p.Layers = reuse(oldLayers, len(r.specs))
	gi, li := 0, 0
	for j, b := range r.buckets {
		n := c.cuts()[j].n
		for i := 0; i < n; i++ {
			_, page, blocks := c.group(j, i)
			grp := &p.Groups[gi]
			grp.Spec = r.specs[b[i]].Spec
			grp.Index, grp.Kind, grp.BlockSize, grp.PageBytes = gi, grp.Spec.Kind, grp.Spec.BlockSize, page
			grp.BlocksPerRequest, grp.Bucket, grp.UniformType = blocks, r.bucket(j), uniformType
			start := li
			for k, slot := i, 0; k < len(b); k, slot = k+n, slot+1 {
				ls := &r.specs[b[k]]
				lp := &p.Layers[li]
				lp.Name, lp.Kind, lp.Role, lp.Spec = ls.Layer.Name, ls.Spec.Kind, ls.Layer.Role, ls.Spec
				lp.Group, lp.Slot, lp.Stage = gi, slot, c.stageOf(b[k])
				lp.Page, lp.Block, lp.KVHeads = r.pages[r.class[b[k]]], ls.Spec.BlockSize, ls.Spec.KVHeads
				names[li] = lp.Name
				li++
			}
			grp.Layers = names[start:li:li]
			gi++
		}
	}
	p.Stages = append(oldStages[:0], c.stages()...)
	if sizes, bytes := c.selInputs(); len(sizes) > 0 {
		p.Buckets = reuse(oldBuckets, len(sizes))
		for j, b := range r.buckets {
			ls := &r.specs[b[0]]
			p.Buckets[j] = Bucket{Kind: ls.Spec.Kind, Layers: sizes[j], BlockSize: ls.Spec.BlockSize, PageBytes: r.pages[r.class[b[0]]], WorstBytes: bytes[j]}
		}
	} else {
		p.Buckets = nil
	}

	p.Logs = append(p.Logs, r.logs...)
	if e.NumGPUBlocksOverride > 0 {
		p.Logs = append(p.Logs, overrideLog(c.blocks0, e.NumGPUBlocksOverride))
	}
	p.Notes = append(append(append(p.Notes, pl.m.Notes...), engineNotes...), r.rank.Notes...)
	p.Warnings = append(p.Warnings, sp.warnings...)
	c.inferred(func(reason string) bool { p.addInferred(reason); return true })
	lines := p.capacityLines()
	p.Logs = append(p.Logs, lines[0], lines[1])
}

// capacityLines are vLLM's two capacity log lines, "GPU KV cache size: N
// tokens" and "Maximum concurrency for N tokens per request: X.XXx",
// formatted as fmt's %s and %.2f would (a plan's concurrency is finite).
func (p *Plan) capacityLines() [2]string {
	var buf [96]byte
	b := append(buf[:0], "GPU KV cache size: "...)
	b = appendCommas(b, p.KVCacheTokens)
	b = append(b, " tokens"...)
	size := string(b)
	b = append(buf[:0], "Maximum concurrency for "...)
	b = appendCommas(b, int64(p.Engine.MaxModelLen))
	b = append(b, " tokens per request: "...)
	b = strconv.AppendFloat(b, p.MaxConcurrency, 'f', 2, 64)
	b = append(b, 'x')
	return [2]string{size, string(b)}
}

// overrideLog is vLLM's line for --num-gpu-blocks-override.
func overrideLog(numBlocks int64, override int) string {
	return fmt.Sprintf("Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d", numBlocks, override)
}

// paddingWarning is vLLM's warning for pad padding layers in a bucket of
// layers layers.
func paddingWarning(pad, layers int) string {
	return fmt.Sprintf("Add %d padding layers, may waste at most %.2f%% KV cache memory", pad, 100*float64(pad)/float64(layers))
}
