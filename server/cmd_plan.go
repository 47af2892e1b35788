package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/plan/planflag"
)

func runPlan(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	mf := newModelFlags(fs)
	ef := planflag.Add(fs)
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	explain := fs.Bool("explain", false, "say why the plan has its groups: the selector's buckets, the group sizes it weighed and its rule, the block-size alignment (--json: an \"explain\" object)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	e, err := ef.Engine("")
	if err != nil {
		return &usageError{err}
	}
	m, err := mf.load(models())
	if err != nil {
		return err
	}
	p, err := plan.New(m, e)
	if err != nil {
		return err
	}
	if *asJSON {
		var x *plan.Explanation
		if *explain {
			x = p.Explain()
		}
		if mf.src.resolved() || x != nil {
			return writeJSON(stdout, struct {
				*plan.Plan
				*modelSources
				Explain *plan.Explanation `json:"explain,omitempty"`
			}{p, mf.src, x})
		}
		return writeJSON(stdout, p)
	}
	writePlanText(stdout, m, p, mf.src)
	if *explain {
		fmt.Fprintln(stdout)
		writeExplain(stdout, "", p.Explain())
	}
	return nil
}

// writeExplain prints a plan's explanation, each line after prefix.
func writeExplain(w io.Writer, prefix string, x *plan.Explanation) {
	for _, l := range x.Lines {
		fmt.Fprintf(w, "%swhy: %s\n", prefix, l)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writePlanText prints what vLLM logs for the plan, then the group table.
// src names where a Hub id's config came from (nil for none).
func writePlanText(w io.Writer, m *model.Model, p *plan.Plan, src *modelSources) {
	e := p.Engine
	fmt.Fprintf(w, "vLLM profile %s: %s\n", p.VLLMVersion, p.VLLMProfile)
	fmt.Fprintf(w, "model %s: %d KV layers (%s)\n", m.Name, len(p.Layers), model.KindSummary(kindCounts(p)))
	src.writeText(w)
	fmt.Fprintf(w, "engine: TP %d, PP %d, max_model_len %s, max_num_batched_tokens %s x %d in flight, kv_cache_dtype %s, %s per rank, backend %s\n",
		e.TensorParallelSize, e.PipelineParallelSize, plan.Commas(int64(e.MaxModelLen)), plan.Commas(int64(e.MaxNumBatchedTokens)),
		e.MaxConcurrentBatches(), e.KVCacheDType, bytesHuman(e.KVCacheMemoryBytes), p.Backend)
	for _, l := range p.LogLines() {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	sel := string(p.Selector)
	if p.Engine.GroupSize > 0 {
		sel = "fixed --kv-cache-group-size"
	}
	if sel == "" {
		sel = "none needed"
	}
	fmt.Fprintf(w, "%s plan, selector %s, g = %d: %d groups, %d slots, %d padding slots (%s per request wasted)\n",
		p.Dispatch, sel, p.GroupSize, p.NumGroups, p.Slots, p.PaddingSlots, bytesHuman(p.PaddingBytesPerRequest))
	fmt.Fprintf(w, "block size %d, page %s B, %s B per block id, num_blocks %s, blocks per request %s, KV cache %s tokens, concurrency %.2fx\n\n",
		p.BlockSize, plan.Commas(p.PageBytes), plan.Commas(p.BytesPerBlock), plan.Commas(p.NumBlocks), plan.Commas(p.BlocksPerRequest),
		plan.Commas(p.KVCacheTokens), p.MaxConcurrency)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"group", "kind", "block", "blocks/req"}
	for s := 0; s < p.Slots; s++ {
		header = append(header, fmt.Sprintf("slot %d", s))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, g := range p.Groups {
		row := []string{fmt.Sprintf("g%d", g.Index), string(g.Kind), fmt.Sprint(g.BlockSize), fmt.Sprint(g.BlocksPerRequest)}
		for s := 0; s < p.Slots; s++ {
			cell := "PAD"
			if s < len(g.Layers) {
				cell = g.Layers[s]
			}
			row = append(row, cell)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if len(p.Stages) > 1 {
		fmt.Fprintln(w)
		for _, s := range p.Stages {
			fmt.Fprintf(w, "PP stage %d: %d layers, %d slots, num_blocks %s\n", s.Index, s.Layers, s.Slots, plan.Commas(s.NumBlocks))
		}
	}
	if p.Inferred {
		fmt.Fprintln(w)
		for _, r := range p.InferredReasons {
			fmt.Fprintf(w, "inferred: %s\n", r)
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range p.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
	}
}

func kindCounts(p *plan.Plan) map[model.Kind]int {
	c := map[model.Kind]int{}
	for _, l := range p.Layers {
		c[l.Kind]++
	}
	return c
}

// bytesHuman renders a byte count in binary units.
func bytesHuman(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
