package api

import (
	"container/list"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The throttle's defaults: a user who mistypes the token a few times
// never waits; a client that keeps guessing waits 1 s, then 2 s, 4 s, …
// up to 5 minutes between guesses, about 300 guesses a day once it is
// there; an address quiet for an hour starts afresh.
const (
	defaultFreeGuesses = 5               // wrong tokens an address may send before any wait
	defaultFirstWait   = time.Second     // the wait after the first wrong token beyond those
	defaultMaxWait     = 5 * time.Minute // the longest wait
	defaultForget      = time.Hour       // quiet time after which an address's wrong tokens are forgotten
	defaultAddrs       = 4096            // client addresses remembered at once (a few hundred KiB)
)

// throttle counts wrong tokens per client address, and makes an address
// that keeps sending them wait before its next token is even checked:
// exponential backoff, answered with 429 and Retry-After. Only wrong
// tokens count (a POST /login, a bearer, an agent's bearer); a right one
// clears the address. It remembers at most capacity addresses, forgetting
// the one whose last wrong token is oldest first, so its memory is bounded
// whatever the clients do. It is safe for concurrent use.
type throttle struct {
	free     int           // wrong tokens an address may send before any wait
	first    time.Duration // the first wait; each wrong token after it doubles the wait
	max      time.Duration // the longest wait
	forget   time.Duration // quiet time after which an address starts afresh
	capacity int           // addresses remembered

	mu    sync.Mutex
	addrs map[string]*list.Element // each holds a *strikes
	order *list.List               // front: the address whose last wrong token is newest
}

// strikes are one address's wrong tokens.
type strikes struct {
	addr  string
	wrong int       // wrong tokens since the address was last cleared
	last  time.Time // the last wrong token
	until time.Time // no token from addr is checked before this
}

func newThrottle() *throttle {
	return &throttle{free: defaultFreeGuesses, first: defaultFirstWait, max: defaultMaxWait, forget: defaultForget,
		capacity: defaultAddrs, addrs: map[string]*list.Element{}, order: list.New()}
}

// wait is how long addr must wait before a token from it is checked
// (0: check it now).
func (t *throttle) wait(addr string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.addrs[addr]
	if !ok {
		return 0
	}
	return max(0, e.Value.(*strikes).until.Sub(now))
}

// fail records a wrong token from addr, and returns the wait it owes
// before its next one is checked.
func (t *throttle) fail(addr string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s *strikes
	if e, ok := t.addrs[addr]; ok {
		s = e.Value.(*strikes)
		t.order.MoveToFront(e)
		if now.Sub(s.last) > t.forget {
			s.wrong = 0
		}
	} else {
		if t.order.Len() >= t.capacity {
			oldest := t.order.Back()
			delete(t.addrs, oldest.Value.(*strikes).addr)
			t.order.Remove(oldest)
		}
		s = &strikes{addr: addr}
		t.addrs[addr] = t.order.PushFront(s)
	}
	s.wrong++
	s.last = now
	s.until = now.Add(t.backoff(s.wrong))
	return t.backoff(s.wrong)
}

// backoff is the wait after the wrong-th wrong token.
func (t *throttle) backoff(wrong int) time.Duration {
	beyond := wrong - t.free
	if beyond <= 0 {
		return 0
	}
	d := t.first
	for i := 1; i < beyond && d < t.max; i++ {
		d *= 2
	}
	return min(d, t.max)
}

// succeed forgets addr's wrong tokens: a right token clears them.
func (t *throttle) succeed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.addrs[addr]; ok {
		delete(t.addrs, addr)
		t.order.Remove(e)
	}
}

// remembered is how many addresses the throttle holds.
func (t *throttle) remembered() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

// clientAddr is the address a request's guesses are counted under: the
// connection's own peer (RemoteAddr; X-Forwarded-For and its kin are the
// client's to forge, so never read), an IPv6 peer by its /64, the
// smallest network one host is given.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	default:
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
}

// retryAfter is Retry-After's value for a wait: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int((d + time.Second - 1) / time.Second))
}
