package live

import (
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// Budget is what one agent may have stored a second: events and bytes
// of their encodings, with a burst of Burst seconds' worth (0: 5 s).
// Zero rates bound nothing.
type Budget struct {
	EventsPerSec, BytesPerSec float64
	Burst                     time.Duration
}

// DefaultAgentBudget is kvscope serve's budget for each agent: about six
// times what the embedded agent's default scenario sends (about 780
// events a second, measured from /metrics over 10 s on make run), so a
// real deployment is not shed, while one agent alone takes at most 4 MiB
// a second of the event log's retention.
var DefaultAgentBudget = Budget{EventsPerSec: 5_000, BytesPerSec: 4 << 20}

func (b Budget) limited() bool { return b.EventsPerSec > 0 || b.BytesPerSec > 0 }

func (b Budget) burst() float64 {
	if b.Burst <= 0 {
		return 5
	}
	return b.Burst.Seconds()
}

// spending is one agent's token buckets against a Budget: what it may
// still store now, refilled at the budget's rates.
type spending struct {
	events, bytes float64
	at            time.Time
	shed          uint64    // events shed so far
	told          time.Time // when the operator was last told of it
}

// spend reports whether an event of n bytes fits the budget now, taking
// it from the buckets when it does.
func (s *spending) spend(b Budget, n int, now time.Time) bool {
	burst := b.burst()
	if s.at.IsZero() {
		s.events, s.bytes = b.EventsPerSec*burst, b.BytesPerSec*burst
	} else if dt := now.Sub(s.at).Seconds(); dt > 0 {
		s.events = min(s.events+dt*b.EventsPerSec, b.EventsPerSec*burst)
		s.bytes = min(s.bytes+dt*b.BytesPerSec, b.BytesPerSec*burst)
	}
	s.at = now
	if b.EventsPerSec > 0 && s.events < 1 || b.BytesPerSec > 0 && s.bytes < float64(n) {
		return false
	}
	s.events--
	s.bytes -= float64(n)
	return true
}

// sheddable reports whether the budget may shed an event of kind k: the
// moment events, never what says who an agent is or what failed.
func sheddable(k event.Kind) bool {
	return !event.IsState(k) && k != event.Error && k != event.PlanMismatch && k != event.StuckTransfer
}
