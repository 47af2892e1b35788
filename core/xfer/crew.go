package xfer

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// crew is helper goroutines started before their work is ready, so that
// their start overlaps the caller's preparations: on this project's 2-core
// VM a goroutine handed to an idle core starts 100–250 µs after it is
// made, about as long as a transfer's set-up and its pairs' allocation
// take. A helper that is ready first waits a while for the work (yielding
// its core), then sleeps until it comes. The caller is always worker 0.
type crew struct {
	helpers int
	fn      func(worker int) error // the work, set once before given closes
	given   chan struct{}          // closed when fn is set (or nothing comes)
	set     atomic.Bool            // given is closed
	once    sync.Once
	wg      sync.WaitGroup
	errs    []error // per worker
}

// crewWait is how long a helper that starts before its work polls for it
// before it sleeps on the channel.
const crewWait = 200 * time.Microsecond

// startCrew starts helpers goroutines (none for helpers < 1).
func startCrew(helpers int) *crew {
	c := &crew{helpers: max(0, helpers), given: make(chan struct{}), errs: make([]error, max(0, helpers)+1)}
	for i := 1; i <= c.helpers; i++ {
		c.wg.Add(1)
		go c.help(i)
	}
	return c
}

// help waits for the work and does it as worker i; a fault comes back as
// worker i's error (a server recovers a handler's own panics, not its
// helpers').
func (c *crew) help(i int) {
	defer c.wg.Done()
	for at := time.Now(); !c.set.Load(); runtime.Gosched() {
		if time.Since(at) > crewWait {
			<-c.given
			break
		}
	}
	if c.fn == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.errs[i] = fmt.Errorf("xfer: writing pairs: %v", r)
		}
	}()
	c.errs[i] = c.fn(i)
}

// give hands fn to the crew once (later calls do nothing); nil dismisses
// it.
func (c *crew) give(fn func(worker int) error) {
	c.once.Do(func() {
		c.fn = fn
		c.set.Store(true)
		close(c.given)
	})
}

// run gives the crew fn, does it as worker 0 too, waits for every helper
// and returns the first error.
func (c *crew) run(fn func(worker int) error) error {
	c.give(fn)
	c.errs[0] = fn(0)
	c.wg.Wait()
	for _, err := range c.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// dismiss sends the helpers home without work if none was given; it does
// not wait for them.
func (c *crew) dismiss() { c.give(nil) }
