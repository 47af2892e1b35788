package main

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// Wall-clock budgets. A budget is what a timing takes at most on the
// machine kvscope is measured on (the first plan in the browser, a
// recompute, the Tune search, a keystroke's wait, a refusal): make test
// holds each timing to a ceiling of ceilingFactor times its budget (or
// more, where a test says why), which catches a hang but not a slower or
// busier machine; make budgets (part of
// make bench) sets budgetsEnv, holds the timings to the budgets themselves
// and prints each as a "budget:" line, the figures server/BENCHMARKS.md
// quotes. The browser tests' waits (waitFor's limits, the browser's
// context) are no budgets: they are a hang's ceilings, ten times or more
// what they take on this machine while other builds load it.

// budgetsEnv is the variable make budgets sets.
const budgetsEnv = "KVSCOPE_BUDGETS"

// ceilingFactor is how many times its budget a timing may take in make
// test.
const ceilingFactor = 10

// measuringBudgets reports whether the tests run under make budgets.
func measuringBudgets() bool { return os.Getenv(budgetsEnv) != "" }

// slack is how many times its budget a timing may take: 1 under make
// budgets, ceilingFactor otherwise.
func slack() float64 {
	if measuringBudgets() {
		return 1
	}
	return ceilingFactor
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// withinBudget checks a timing (got, in unit: "ms" or "s") against its
// budget: under make budgets it prints a "budget:" line and fails the
// test over the budget; otherwise it logs the figure and fails the test
// only over ceilingFactor times the budget. It reports whether the timing
// was within what it was held to.
func withinBudget(t testing.TB, what string, got, budget float64, unit string) bool {
	t.Helper()
	return withinCeiling(t, what, got, budget, ceilingFactor*budget, unit)
}

// withinCeiling is withinBudget with make test's ceiling given, for a
// timing whose ten times its budget a loaded machine exceeds without a
// hang (the page's stalls while the Tune view searches).
func withinCeiling(t testing.TB, what string, got, budget, ceiling float64, unit string) bool {
	t.Helper()
	limit, held := budget, "budget"
	if !measuringBudgets() {
		limit, held = ceiling, fmt.Sprintf("ceiling (%.3g× the budget of %g %s)", ceiling/budget, budget, unit)
	}
	verdict := "within"
	if got > limit {
		verdict = "OVER"
	}
	line := fmt.Sprintf("%s: %.1f %s, %s %s %g %s", what, got, unit, verdict, held, limit, unit)
	if measuringBudgets() {
		fmt.Printf("budget: %s: %s\n", t.Name(), line)
	}
	if got > limit {
		t.Errorf("%s", line)
		return false
	}
	if !measuringBudgets() {
		t.Log(line)
	}
	return true
}
