package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/plan/planflag"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/core/xfer"
)

// tuneFlags are kvscope tune's flags: the model, the flags P and D keep
// (as kvscope pd takes them), the ranges searched and the objective.
type tuneFlags struct {
	mf        modelFlags
	ef        *planflag.Set
	ranges    tune.Ranges
	prompt    *int
	objective *string
	weights   *string
	top       *int
}

func newTuneFlags(fs *flag.FlagSet) *tuneFlags {
	f := &tuneFlags{mf: newModelFlags(fs), ef: planflag.Add(fs, "p", "d")}
	r := &f.ranges
	fs.StringVar(&r.TPPairs, "tp-pairs", "", "P:D tensor-parallel pairs (2:4,1:2), or P sizes x D sizes (1,2x2,4,8); default the engines' own")
	fs.StringVar(&r.BlockSizes, "block-sizes", tune.DefaultBlockSizes, "D's --block-size values: a list and/or from:to:step spans; 0 is the version's own")
	fs.StringVar(&r.PBlockSizes, "p-block-sizes", "", "P's --block-size values (default P's own)")
	fs.StringVar(&r.MinGroupLayers, "min-group-layers", "", "--min-kv-cache-group-layers values, both engines (default their own)")
	fs.StringVar(&r.Selectors, "selectors", "", "group-size selectors, both engines: default (the version's), classic, min, balanced, padding-bytes")
	fs.StringVar(&r.MaxBatched, "mnbt", "", "D's --max-num-batched-tokens values (default D's own)")
	fs.StringVar(&r.KVCacheDTypes, "kv-cache-dtypes", "", "KV cache dtypes, both engines: default, auto, bfloat16, float16, fp8")
	fs.StringVar(&r.Connectors, "connectors", "", "nixl (D pulls) and/or nixl-push (P pushes); default nixl")
	f.prompt = fs.Int("prompt-tokens", 4096, "prompt tokens of the request whose descriptors each candidate costs")
	f.objective = fs.String("objective", tune.ByKVTokens, "rank by "+strings.Join(tune.Objectives, ", "))
	f.weights = fs.String("weights", "", "with --objective mix: kv=W,concurrency=W,descriptors=W,padding=W (default kv=1,descriptors=1)")
	f.top = fs.Int("top", 20, "candidates listed")
	return f
}

// space builds the search from the parsed flags.
func (f *tuneFlags) space() (tune.Space, error) {
	pe, err := f.ef.Engine("p")
	if err != nil {
		return tune.Space{}, &usageError{err}
	}
	de, err := f.ef.Engine("d")
	if err != nil {
		return tune.Space{}, &usageError{err}
	}
	obj, err := tune.ParseObjective(*f.objective, *f.weights)
	if err != nil {
		return tune.Space{}, &usageError{err}
	}
	m, err := f.mf.load(models())
	if err != nil {
		return tune.Space{}, err
	}
	draft := *f.mf.draft
	if draft != "" && draft != "mtp" {
		draft = model.DisplayName(draft)
	}
	return tune.Space{Model: m, ModelName: m.Name, DraftName: draft, P: pe, D: de, Ranges: f.ranges,
		Request: xfer.Request{PromptTokens: *f.prompt}, Objective: obj, Top: *f.top}, nil
}

func runTune(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	f := newTuneFlags(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// A range given empty is a mistake, not a request for the default.
	var empty error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "tp-pairs", "block-sizes", "p-block-sizes", "min-group-layers", "selectors", "mnbt", "kv-cache-dtypes", "connectors":
			if strings.TrimSpace(fl.Value.String()) == "" && empty == nil {
				empty = &usageError{fmt.Errorf("--%s is empty: give values (a,b,c) or a span (from:to:step), or leave the flag out for its default", fl.Name)}
			}
		}
	})
	if empty != nil {
		return empty
	}
	sp, err := f.space()
	if err != nil {
		return err
	}
	s, err := tune.NewSearch(sp)
	if err != nil {
		return &usageError{err}
	}
	if err := s.Step(context.Background(), len(s.Candidates())); err != nil {
		return err
	}
	r := s.Result()
	if *asJSON {
		if f.mf.src.resolved() {
			return writeJSON(stdout, struct {
				*tune.Result
				*modelSources
			}{r, f.mf.src})
		}
		return writeJSON(stdout, r)
	}
	writeTuneText(stdout, sp, r, f.mf.src)
	return nil
}

// writeTuneText prints the refusals, the top candidates with their vllm
// serve lines, and the Pareto front.
func writeTuneText(w io.Writer, sp tune.Space, r *tune.Result, src *modelSources) {
	fmt.Fprintf(w, "model %s: %d candidates, %d accepted, ranked by %s (descriptors of a %d-token request)\n",
		sp.ModelName, r.Total, r.Feasible, r.Objective.Name, r.Request.PromptTokens)
	src.writeText(w)
	if len(r.Refused) > 0 {
		fmt.Fprintln(w, "\nrefused:")
		for _, x := range r.Refused {
			fmt.Fprintf(w, "  %6d  %s (e.g. %s)\n", x.Count, x.Reason, x.Example)
		}
	}
	if len(r.Top) == 0 {
		fmt.Fprintln(w, "\nno candidate is accepted: widen a range or read the refusals")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tTP\tD block\t(planned)\tP block\tselector\tmin layers\tmnbt\tdtype\tconnector\tD KV tokens\tD concurrency\tdescriptors\tpages divide\tpareto\t")
	for i, s := range r.Top {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%v\t%v\t\n", i+1, s.TP, orAuto(s.DBlockSize), s.DBlock, s.PBlock,
			orDefault(s.Selector), orAuto(s.MinGroupLayers), orAuto(s.MaxBatched), orDefault(s.KVCacheDType), s.Connector,
			plan.Commas(s.DKVTokens), s.DConcurrency, commasInt(s.Descs), s.PagesDivide, s.OnFront)
	}
	tw.Flush()
	best := r.Top[0]
	fmt.Fprintf(w, "\nbest (#1):\n  P: %s\n  D: %s\n", best.PServe, best.DServe)
	if d := r.Dividing; d == nil {
		fmt.Fprintln(w, "\nno accepted candidate has P and D pages that divide: descriptors split at both sides' page boundaries")
	} else if !best.PagesDivide {
		fmt.Fprintf(w, "\npages divide: D --block-size %s (planned %d; P %d) with TP %s, %s D KV tokens (%+.1f%% against #1), %s descriptors (%s for #1):\n  P: %s\n  D: %s\n",
			orAuto(d.DBlockSize), d.DBlock, d.PBlock, d.TP, plan.Commas(d.DKVTokens), 100*float64(d.DKVTokens-best.DKVTokens)/float64(max(best.DKVTokens, 1)),
			commasInt(d.Descs), commasInt(best.Descs), d.PServe, d.DServe)
	}
	fmt.Fprintf(w, "\nPareto front (D KV tokens against descriptors per request), %d points:\n", len(r.Front))
	for _, s := range r.Front {
		fmt.Fprintf(w, "  %s KV tokens, %s descriptors: TP %s, D block %s (planned %d)\n", plan.Commas(s.DKVTokens), commasInt(s.Descs), s.TP, orAuto(s.DBlockSize), s.DBlock)
	}
	if len(r.Inferred) > 0 {
		fmt.Fprintf(w, "\ninferred (not read from vLLM's code): %s\n", strings.Join(r.Inferred, "; "))
	}
}

func orAuto(v int) string {
	if v == 0 {
		return "auto"
	}
	return fmt.Sprint(v)
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}
