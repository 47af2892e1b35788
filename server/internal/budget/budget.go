// Package budget holds the server's tests to their wall-clock budgets. A
// budget is what a timing takes at most on the machine kvscope is measured
// on (the first plan in the browser, a recompute, the Tune search, a
// keystroke's wait, a refusal, an ack): make test holds each timing to a
// ceiling of CeilingFactor times its budget (or more, where a test says
// why), which catches a hang but not a slower or busier machine; make
// budgets (part of make bench) sets Env, holds the timings to the budgets
// themselves and prints each as a "budget:" line, the figures the
// BENCHMARKS.md files quote. Waits for a condition (a page to draw, an
// event to arrive) are no budgets: they are a hang's ceilings, ten times
// or more what they take on this machine while other builds load it.
package budget

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// Env is the variable make budgets sets.
const Env = "KVSCOPE_BUDGETS"

// CeilingFactor is how many times its budget a timing may take in make
// test.
const CeilingFactor = 10

// Measuring reports whether the tests run under make budgets.
func Measuring() bool { return os.Getenv(Env) != "" }

// Slack is how many times its budget a timing may take: 1 under make
// budgets, CeilingFactor otherwise.
func Slack() float64 {
	if Measuring() {
		return 1
	}
	return CeilingFactor
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Within checks a timing (got, in unit: "ms" or "s") against its
// budget: under make budgets it prints a "budget:" line and fails the
// test over the budget; otherwise it logs the figure and fails the test
// only over CeilingFactor times the budget. It reports whether the timing
// was within what it was held to.
func Within(t testing.TB, what string, got, budget float64, unit string) bool {
	t.Helper()
	return WithinCeiling(t, what, got, budget, CeilingFactor*budget, unit)
}

// WithinCeiling is Within with make test's ceiling given, for a
// timing whose ten times its budget a loaded machine exceeds without a
// hang (the page's stalls while the Tune view searches).
func WithinCeiling(t testing.TB, what string, got, budget, ceiling float64, unit string) bool {
	t.Helper()
	limit, held := budget, "budget"
	if !Measuring() {
		limit, held = ceiling, fmt.Sprintf("ceiling (%.3g× the budget of %g %s)", ceiling/budget, budget, unit)
	}
	verdict := "within"
	if got > limit {
		verdict = "OVER"
	}
	line := fmt.Sprintf("%s: %.1f %s, %s %s %g %s", what, got, unit, verdict, held, limit, unit)
	if Measuring() {
		fmt.Printf("budget: %s: %s\n", t.Name(), line)
	}
	if got > limit {
		t.Errorf("%s", line)
		return false
	}
	if !Measuring() {
		t.Log(line)
	}
	return true
}
