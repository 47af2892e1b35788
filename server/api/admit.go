package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// Limits are what one API computation may cost. Each is a flag of kvscope
// serve; the defaults suit a 2-core, 24 GiB machine. kvscope pd and
// kvscope oracle bound their work by the same estimates (Admit).
type Limits struct {
	// MaxMemory is the memory the heavy endpoints may hold at once, by
	// their estimates (/api/pd, /api/oracle, /api/check); a request whose
	// own estimate exceeds it is refused (413).
	MaxMemory int64
	// MaxPairs bounds one request's descriptor pairs (413 beyond): 4
	// million by default, about 1 GiB of pairs, a million-token prompt
	// of a 28-layer model.
	MaxPairs int64
	// MaxResponse bounds one response's estimated size (413 beyond).
	MaxResponse int64
	// QueueWait is how long a request waits for memory before 429.
	QueueWait time.Duration
	// MaxQueue is how many requests may wait at once (429 beyond; 0:
	// none waits).
	MaxQueue int
	// MaxRunning is how many heavy requests compute at once, whatever
	// memory they need (0: memory alone bounds them). Each computes on
	// one core: more than the cores but one would leave /api/plan, static
	// files and websockets waiting for a core.
	MaxRunning int
	// TuneDeadline bounds one /api/tune request, its wait in the queue
	// included (0: DefaultTuneDeadline): a search still running then
	// answers what it has evaluated, marked partial. It stays under the
	// HTTP server's 60 s write timeout, so the answer is never lost to it.
	TuneDeadline time.Duration
}

// DefaultTuneDeadline is TuneDeadline's default, MaxTuneDeadline its
// bound: 15 s under the server's write timeout (60 s) leaves room for the
// candidate under way when the deadline passes and the answer's encoding.
const (
	DefaultTuneDeadline = 40 * time.Second
	MaxTuneDeadline     = 45 * time.Second
)

// MaxQueueLimit bounds --max-queue (each waiter holds its request's
// plans while it waits), MaxRunningLimit --max-running.
const (
	MaxQueueLimit   = 4096
	MaxRunningLimit = 1024
)

// DefaultLimits sizes the limits to this machine: heavy work may hold a
// sixteenth of its memory (1.5 GiB on 24 GiB), at least 512 MiB, and
// computes on every core but one (at least one).
func DefaultLimits() Limits {
	return Limits{MaxMemory: max(TotalMemory()/16, 512<<20), MaxPairs: 4_000_000, MaxResponse: 64 << 20,
		QueueWait: 10 * time.Second, MaxQueue: 64, MaxRunning: max(1, runtime.NumCPU()-1), TuneDeadline: DefaultTuneDeadline}
}

// tuneDeadline is l.TuneDeadline, or its default.
func (l Limits) tuneDeadline() time.Duration {
	if l.TuneDeadline <= 0 {
		return DefaultTuneDeadline
	}
	return l.TuneDeadline
}

// TotalMemory is the machine's memory (Linux /proc/meminfo), or 8 GiB
// where it cannot be read.
func TotalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 8 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 8 << 30
}

// Admit bounds the cost of s's transfer from its prepared plans (before
// any registration or pair exists) and refuses it over a limit: pairs,
// the response's size (when there is a response to size), and the memory
// need says the work will hold. It returns that memory.
func (l Limits) Admit(s xfer.Setup, pd *xfer.PD, response bool, need func(xfer.Cost) int64) (int64, error) {
	pp, dp := pd.UsedPlans()
	if err := s.Request.Check(pp, dp); err != nil {
		return 0, BadData(err)
	}
	c := xfer.EstimateCost(s.Model, pp, dp, s.Request)
	if c.Pairs > l.MaxPairs {
		return 0, &TooBigError{"descriptor pairs", c.Pairs, l.MaxPairs, "--max-pairs"}
	}
	if resp := xfer.SatMul(c.Regions, regionJSONBytes); response && resp > l.MaxResponse {
		return 0, &TooBigError{"response", resp, l.MaxResponse, "--max-response"}
	}
	n := need(c)
	if n > l.MaxMemory {
		return 0, &TooBigError{"memory", n, l.MaxMemory, "--max-memory"}
	}
	return n, nil
}

// precheck refuses, from the two engines' own plans alone, a request
// whose descriptor pairs are far over the limit (four times it: the
// TP-invariant plans Prepare adds may differ a little), before the
// costlier Prepare runs. A hostile body is refused in tens of ms.
func (l Limits) precheck(s xfer.Setup) error {
	if _, ok := s.Connector.Transport(); !ok {
		return nil
	}
	pp, err := plan.New(s.Model, s.P)
	if err != nil {
		return nil // Prepare reports it, with the side named
	}
	dp, err := plan.New(s.Model, s.D)
	if err != nil {
		return nil
	}
	if c := xfer.EstimateCost(s.Model, pp, dp, s.Request); c.Pairs/4 > l.MaxPairs {
		return &TooBigError{"descriptor pairs", c.Pairs, l.MaxPairs, "--max-pairs"}
	}
	return nil
}

// AdmitPD admits the preparation of a P/D setup that is not an API
// request (Run live: /api/live/run) as /api/pd is admitted, before anything
// is prepared. The planning comes first, in the heavy requests' queue
// (429 ErrBusy) with one request's base memory and a core: plan (fitting
// the KV pools, say) returns the setup, whose two engines' own plans then
// bound its transfer: descriptor pairs far over --max-pairs, or memory
// (PDMemory: its registrations and pairs) over --max-memory, are refused
// (413 TooBigError). The setup then holds that memory (waiting in the queue
// again when it is more than the base) until the caller, done preparing
// it, calls release.
func (s *Server) AdmitPD(ctx context.Context, plan func() (xfer.Setup, error)) (setup xfer.Setup, release func(), err error) {
	if err := s.adm.acquire(ctx, baseBytes); err != nil {
		return setup, nil, err
	}
	held := int64(baseBytes)
	defer func() {
		if err != nil && held > 0 {
			s.adm.release(held)
		}
	}()
	if setup, err = plan(); err != nil {
		return setup, nil, err
	}
	c, ok, err := planCost(setup)
	if err != nil {
		return setup, nil, BadData(err)
	}
	if !ok {
		c = xfer.Cost{} // no transport: no registrations, no pairs
	}
	if c.Pairs/4 > s.lim.MaxPairs {
		return setup, nil, &TooBigError{"descriptor pairs", c.Pairs, s.lim.MaxPairs, "--max-pairs"}
	}
	n := PDMemory(c)
	if n > s.lim.MaxMemory {
		return setup, nil, &TooBigError{"memory", n, s.lim.MaxMemory, "--max-memory"}
	}
	if n > held {
		s.adm.release(held)
		held = 0
		if err = s.adm.acquire(ctx, n); err != nil {
			return setup, nil, err
		}
		held = n
	}
	return setup, func() { s.adm.release(held) }, nil
}

// planCost is a setup's transfer cost estimated from the two engines' own
// plans; ok is false when its connector moves nothing.
func planCost(s xfer.Setup) (c xfer.Cost, ok bool, err error) {
	if _, ok := s.Connector.Transport(); !ok {
		return c, false, nil
	}
	pp, err := plan.New(s.Model, s.P)
	if err != nil {
		return c, false, fmt.Errorf("P: %w", err)
	}
	dp, err := plan.New(s.Model, s.D)
	if err != nil {
		return c, false, fmt.Errorf("D: %w", err)
	}
	return xfer.EstimateCost(s.Model, pp, dp, s.Request), true, nil
}

// PDMemory and OracleMemory turn a cost into the memory pd (every pair is
// built before it is counted) and the oracle hold. The oracle keeps the
// pairs too (to replay them), and besides them only what its check works
// with: each pair's pieces (a pair cut where a P or D page ends, so at
// most one piece a pair and one more a page), a few words a page, its page
// tables (dense by region and block id) and one D page with its expected
// rows (it writes P's bytes into one D page at a time and reads it back).
// It no longer materialises the pages (Cost.OracleBytes: an agent's Prover
// does); a request whose pages pass the oracle's own bound (oracle.MaxBytes)
// is refused by the oracle. TestOracleMemoryEstimate holds these to
// measured use.
func PDMemory(c xfer.Cost) int64 {
	return xfer.SatAdd(baseBytes+xfer.SatMul(c.Regions, regionBytes), xfer.SatMul(c.Pairs, pairBytes))
}

func OracleMemory(c xfer.Cost) int64 {
	n := xfer.SatAdd(oracleBaseBytes+xfer.SatMul(c.Regions, regionBytes), xfer.SatMul(c.Pairs, pairBytes+pieceBytes))
	n = xfer.SatAdd(n, xfer.SatMul(c.Pages, pieceBytes+pageBytes))
	n = xfer.SatAdd(n, xfer.SatMul(c.PageSlots, slotBytes))
	return xfer.SatAdd(n, xfer.SatMul(c.MaxPage, 2))
}

// What a request holds: a registered region's JSON in a response, and its
// memory while the transfer is built; one kept descriptor pair; the model,
// plans and bookkeeping of any heavy request.
const (
	regionJSONBytes = 320
	regionBytes     = 1 << 10
	pairBytes       = 256
	baseBytes       = 32 << 20
)

// What the oracle's check holds besides the pairs (see OracleMemory).
const (
	// oracleBaseBytes is an oracle request's model, plans, registrations
	// and response: measured under 1 MiB for a 16-token request.
	oracleBaseBytes = 4 << 20
	pieceBytes      = 64 // one piece of a pair (56) and its place in its page's list (4)
	pageBytes       = 32 // a page's length, its list's bounds and its key when read back
	slotBytes       = 4  // one entry of a page table
)

// ErrBusy is a request that found no memory in time (429).
var ErrBusy = errors.New("the server is busy with other heavy requests")

// TooBigError is a request whose estimate exceeds a limit (413).
type TooBigError struct {
	What            string // "memory", "descriptor pairs", "response"
	Estimate, Limit int64
	Flag            string // the limit's flag
}

func (e *TooBigError) Error() string {
	return fmt.Sprintf("this request would take %s %s, over the limit of %s (%s): ask for fewer tokens, ranks or layers",
		amount(e.What, e.Estimate), e.What, amount(e.What, e.Limit), e.Flag)
}

func amount(what string, n int64) string {
	if what == "descriptor pairs" {
		return strconv.FormatInt(n, 10)
	}
	if n < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// admission is a weighted semaphore over the heavy endpoints' memory,
// and a counting one over their cores: a request takes its estimate and
// one of MaxRunning places, waits in line (first come, first served) at
// most QueueWait, and gives them back when done. After the last heavy
// request leaves, the memory is handed back to the system.
type admission struct {
	mu       sync.Mutex
	lim      Limits
	used     int64
	running  int
	waiters  []*waiter
	idleOnce sync.Mutex // one FreeOSMemory at a time
}

// fits reports whether a request needing need bytes may start now; a.mu
// is held.
func (a *admission) fits(need int64) bool {
	return a.used+need <= a.lim.MaxMemory && (a.lim.MaxRunning <= 0 || a.running < a.lim.MaxRunning)
}

type waiter struct {
	need  int64
	ready chan struct{}
}

func newAdmission(lim Limits) *admission { return &admission{lim: lim} }

// acquire takes need bytes, waiting at most QueueWait; ctx ending (the
// client left) stops the wait.
func (a *admission) acquire(ctx context.Context, need int64) error {
	if need > a.lim.MaxMemory {
		return &TooBigError{"memory", need, a.lim.MaxMemory, "--max-memory"}
	}
	a.mu.Lock()
	if len(a.waiters) == 0 && a.fits(need) {
		a.used += need
		a.running++
		a.mu.Unlock()
		return nil
	}
	if len(a.waiters) >= a.lim.MaxQueue {
		a.mu.Unlock()
		return ErrBusy
	}
	w := &waiter{need: need, ready: make(chan struct{})}
	a.waiters = append(a.waiters, w)
	a.mu.Unlock()
	timer := time.NewTimer(a.lim.QueueWait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	case <-timer.C:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		a.used -= need
		a.running--
		a.grant()
	default:
		for i, x := range a.waiters {
			if x == w {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				break
			}
		}
		a.grant() // a large waiter leaving may let smaller ones in
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrBusy
}

// grant admits waiters in order while they fit. a.mu is held.
func (a *admission) grant() {
	for len(a.waiters) > 0 && a.fits(a.waiters[0].need) {
		w := a.waiters[0]
		a.waiters = a.waiters[1:]
		a.used += w.need
		a.running++
		close(w.ready)
	}
}

// held is the memory admitted now.
func (a *admission) held() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}

// release gives back need bytes and a place; the last one out returns
// the heap's free memory to the system.
func (a *admission) release(need int64) {
	a.mu.Lock()
	a.used -= need
	a.running--
	a.grant()
	idle := a.running == 0
	a.mu.Unlock()
	if idle && a.idleOnce.TryLock() {
		go func() {
			defer a.idleOnce.Unlock()
			// Two collections: the first moves pooled buffers (the
			// oracle's check scratch: page and pair tables) to the pools'
			// victim caches, the second frees them; FreeOSMemory then
			// returns the pages.
			runtime.GC()
			debug.FreeOSMemory()
		}()
	}
}
