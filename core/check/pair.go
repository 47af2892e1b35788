package check

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Pair is a prefill and a decode engine, each planned from its own
// startup log as Run plans one: the engines a P/D preflight transfers
// between.
type Pair struct {
	P, D *Result
	// Model is the model both engines serve (with the drafter P's log
	// runs, if any); Engines are the engines each log implies, with the
	// caller's Adjust applied, P first.
	Model   *model.Model
	Engines [2]plan.Engine
}

// SideError is a pair's error that belongs to one side: "P" or "D".
type SideError struct {
	Side string
	Err  error
}

func (e *SideError) Error() string { return fmt.Sprintf("%s's log: %v", e.Side, e.Err) }
func (e *SideError) Unwrap() error { return e.Err }

// RunPair checks P's and D's logs (each as Run checks it) and returns the
// pair to transfer between. It refuses a side whose engine did not start
// (the log shows vLLM's start-up refusal: nothing to transfer), and two
// logs of different models.
func RunPair(p, d Input) (*Pair, error) {
	pr := &Pair{}
	for i, side := range []struct {
		name string
		in   Input
		out  **Result
	}{{"P", p, &pr.P}, {"D", d, &pr.D}} {
		if side.in.Log == nil {
			return nil, &SideError{side.name, fmt.Errorf("no log")}
		}
		res, err := Run(side.in)
		if err != nil {
			return nil, &SideError{side.name, err}
		}
		if res.Plan == nil {
			return nil, &SideError{side.name, fmt.Errorf("%s's engine did not start (the log shows vLLM's start-up refusal): nothing to transfer", side.name)}
		}
		*side.out = res
		pr.Engines[i] = res.Plan.Engine
	}
	if pn, dn := pr.P.ModelRef.Name, pr.D.ModelRef.Name; pn != dn {
		return nil, fmt.Errorf("P's log serves %s, D's %s: P and D must serve one model", pn, dn)
	}
	pr.Model = pr.P.ModelRef
	return pr, nil
}
