package xfer

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// This file is the group-pair path's scheduling: a request's jobs cut
// into tasks, and the workers that take them.

// parallelPairs is how many pairs a transfer must have before more than
// one worker writes them: below it, starting a goroutine costs more than
// the writing it would take over.
const parallelPairs = 1 << 14

// taskPairs is about how many pairs one writing task holds: a run of a
// rank pair's jobs (a few µs of writing), so that workers share a
// transfer evenly however late each starts.
const taskPairs = 4096

// pairWriter writes the group-pair path's jobs as a list of tasks the
// workers take in turn: first making each rank pair's slice (when the
// pairs are kept), then, rank pair (one NIXL transfer) by rank pair, runs
// of its jobs, each written where the jobs before it end and tallied on
// its own; a rank pair's tally is its tasks' tallies joined in order, so
// the pairs and the tallies come out the same whoever writes them.
type pairWriter struct {
	t        *Transfer
	opt      Options
	keep     bool // the pairs are written (KeepPairs), not only tallied
	pr       *pairing
	jobPairs []int // per job: its pairs
	sets     []tokenRuns
	dTP      int
	counts   []int // per rank pair (P rank * dTP + D rank)

	// Per rank pair: its slice, and whether it is made yet.
	pairs [][]Pair
	ready []atomic.Bool

	tasks   []pairTask
	tallies []tally       // per task
	groups  []*groupTally // per worker
	taken   atomic.Int32  // how many tasks the workers have taken
}

// pairTask is one task of a pairWriter: making rank pair k's slice, or
// writing jobs [lo, hi) of its list (pairing.jobsOf) from its pair at on.
type pairTask struct {
	k, lo, hi, at int
	makes         bool
}

// writeAll lists the tasks, has workers (the caller among them) do them
// and returns the group pairs' totals and each rank pair's tally.
func (w *pairWriter) writeAll(workers int) (*groupTally, []tally, error) {
	if w.keep {
		// A slice each, so that workers share the zeroing.
		for _, rp := range w.t.RankPairs {
			w.tasks = append(w.tasks, pairTask{k: rp.P*w.dTP + rp.D, makes: true})
		}
	}
	for _, rp := range w.t.RankPairs {
		k := rp.P*w.dTP + rp.D
		jobs := w.pr.jobsOf[k]
		for lo, at := 0, 0; lo < len(jobs); {
			hi, n := lo, 0
			for hi < len(jobs) && (n == 0 || n+w.jobPairs[jobs[hi]] <= taskPairs) {
				n += w.jobPairs[jobs[hi]]
				hi++
			}
			w.tasks = append(w.tasks, pairTask{k: k, lo: lo, hi: hi, at: at})
			lo, at = hi, at+n
		}
	}
	w.tallies = make([]tally, len(w.tasks))
	w.groups = make([]*groupTally, workers)
	if workers > 1 {
		// Each set's runs under the first shape asked of it, worked out
		// here once rather than by every worker that meets the set (a
		// worker whose job wants another shape works out its own).
		for ji := range w.pr.jobs {
			jb := &w.pr.jobs[ji]
			if set := w.pr.setOf[jb.item]; jb.at.attn && w.sets[set].last == nil {
				w.sets[set].at(&jb.at.shape)
			}
		}
	}
	if err := runWorkers(workers, w.write); err != nil {
		return nil, nil, err
	}
	tallies := make([]tally, len(w.counts))
	for i, tk := range w.tasks {
		tallies[tk.k].join(&w.tallies[i])
	}
	groups := w.groups[0]
	for _, g := range w.groups[1:] {
		if g != nil {
			groups.merge(g)
		}
	}
	return groups, tallies, nil
}

// write is worker's part: it takes tasks until none is left.
func (w *pairWriter) write(worker int) error {
	t := w.t
	sets := slices.Clone(w.sets) // the shapes it works out (tokenRuns.at) are its own
	groups := newGroupTally(len(t.PRegs[0].plan.Groups), len(t.DRegs[0].plan.Groups), len(w.pr.items))
	w.groups[worker] = groups
	for {
		i := int(w.taken.Add(1)) - 1
		if i >= len(w.tasks) {
			return nil
		}
		tk := &w.tasks[i]
		if tk.makes {
			w.pairs[tk.k] = make([]Pair, w.counts[tk.k])
			w.ready[tk.k].Store(true)
			continue
		}
		if err := canceled(w.opt.Ctx); err != nil {
			return err
		}
		var all []Pair
		if w.keep {
			// The rank pairs' slices are the first tasks: this one's is
			// made, or being made by another worker.
			for !w.ready[tk.k].Load() {
				runtime.Gosched()
			}
			all = w.pairs[tk.k]
		}
		at := tk.at
		// Tallied in a local, stored once the task is done: the tasks'
		// tallies lie side by side, and one written job by job where
		// another worker writes its neighbour's would bounce their cache
		// line between the cores.
		var c tally
		for _, ji := range w.pr.jobsOf[tk.k][tk.lo:tk.hi] {
			jb := &w.pr.jobs[ji]
			n := w.jobPairs[ji]
			if n == 0 {
				continue
			}
			var out []Pair // nil where the caller keeps no pairs: tallied, not written
			if w.keep {
				out = all[at : at+n]
				at += n
			}
			var job tally
			if jb.at.attn {
				set := &sets[w.pr.setOf[jb.item]]
				job = attnTally(&jb.at, set)
				if out != nil {
					attnPairs(out, &jb.at, set)
				}
			} else {
				var q *Pair
				if out != nil {
					q = &out[0]
				}
				stateRun(q, &jb.at, t.PPages[jb.at.f.pg].IDs[0], t.DPages[jb.at.f.dg].IDs[0], &job)
			}
			c.join(&job)
			groups.add(jb.at.f.pg, jb.at.f.dg, jb.item, jb.at.kind, n, job.bytes)
		}
		w.tallies[i] = c
	}
}

// runWorkers runs fn as workers 1 to n-1, each on a goroutine of its own,
// and as worker 0 on the caller's; it waits for them all and returns the
// first error by worker. A worker's panic comes back as its error (a
// server recovers a handler's own panics, not those of the goroutines it
// starts).
func runWorkers(n int, fn func(worker int) error) error {
	errs := make([]error, max(1, n))
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("xfer: writing pairs: %v", r)
				}
			}()
			errs[i] = fn(i)
		})
	}
	errs[0] = fn(0)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
