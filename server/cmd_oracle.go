package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/server/api"
)

func runOracle(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("oracle", flag.ContinueOnError)
	f := newPDFlags(fs)
	sweep := fs.Bool("sweep", false, "run the sweep over model families, TP pairs, plans, block sizes, prefix hits, pull and push")
	quick := fs.Bool("quick", false, "with --sweep: the quick sweep (a few hundred cases)")
	workers := fs.Int("workers", 0, "with --sweep: parallel workers (0 = every core)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sweep {
		n, err := sweepWorkers(*workers, runtime.NumCPU())
		if err != nil {
			return err
		}
		return runSweep(stdout, *quick, n, *asJSON)
	}
	s, err := f.setup(true)
	if err != nil {
		return err
	}
	r, err := f.run(s, api.OracleMemory)
	if err != nil {
		return err
	}
	if r.Transfer == nil {
		return fmt.Errorf("%s", r.Note)
	}
	res, err := oracle.Check(s.Model, r.Transfer)
	if err != nil {
		return err
	}
	if *asJSON {
		if f.mf.src.resolved() {
			return writeJSON(stdout, struct {
				*oracle.Result
				*modelSources
			}{res, f.mf.src})
		}
		return writeJSON(stdout, res)
	}
	f.mf.src.writeText(stdout)
	switch res.Verdict {
	case oracle.Exact:
		fmt.Fprintf(stdout, "exact: %s descriptor pairs moved %s B; %s D bytes read back, every needed head and token holds P's bytes and nothing else was written\n",
			commasInt(res.Pairs), commasInt(int(res.Bytes)), commasInt(int(res.Checked)))
	case oracle.Rejected:
		fmt.Fprintf(stdout, "%s\n", res.Reason)
	default:
		fmt.Fprintf(stdout, "WRONG: %s\n", res.Mismatch)
	}
	return nil
}

// sweepWorkers checks --workers: 0 is every core, and more than four
// workers a core only adds memory (each holds a case's buffers), so a
// larger count is refused with the cap named.
func sweepWorkers(n, cores int) (int, error) {
	limit := 4 * cores
	switch {
	case n < 0:
		return 0, fmt.Errorf("--workers %d: must not be negative", n)
	case n > limit:
		return 0, fmt.Errorf("--workers %d: at most %d on this machine (4 a core: more only adds memory)", n, limit)
	}
	return n, nil
}

func runSweep(stdout io.Writer, quick bool, workers int, asJSON bool) error {
	cat := catalog()
	load := func(name string) (*model.Model, error) {
		_, data, err := cat.Lookup(name)
		if err != nil {
			return nil, err
		}
		m, err := model.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m.Name = name
		return m, nil
	}
	models, err := oracle.SweepModels(load, quick)
	if err != nil {
		return err
	}
	// Ctrl-C stops the sweep between deployments and prints what ran.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := oracle.SweepContext(ctx, models, oracle.Cases(models), workers)
	if asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		if res.Stopped {
			fmt.Fprintln(stdout, "interrupted: the cases that ran are")
		}
		fmt.Fprintf(stdout, "%s cases in %.1f s on %d workers: %s exact, %s rejected, %d wrong\n",
			commasInt(res.Cases), res.Seconds, res.Workers, commasInt(res.Exact), commasInt(res.Rejected), res.Wrong)
		var keys []string
		for k := range res.ByCategory {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := res.ByCategory[k]
			fmt.Fprintf(stdout, "  %-16s %6d cases: %6d exact, %5d rejected, %d wrong\n", k, c.Cases, c.Exact, c.Rejected, c.Wrong)
		}
		for rule, n := range res.Rejections {
			fmt.Fprintf(stdout, "  rejected by %s: %d\n", rule, n)
		}
		if len(res.Failures) > 0 {
			fmt.Fprintf(stdout, "failures:\n  %s\n", strings.Join(res.Failures, "\n  "))
		}
	}
	if res.Wrong > 0 {
		return fmt.Errorf("%d cases are wrong", res.Wrong)
	}
	return nil
}

func commasInt(n int) string { return plan.Commas(int64(n)) }
