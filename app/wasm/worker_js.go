//go:build js && wasm

package main

import (
	"context"
	"encoding/json"
	"syscall/js"
	"time"

	"github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/model"
)

// inWorker reports whether app.wasm runs in a worker: no document.
func inWorker() bool { return js.Global().Get("document").IsUndefined() }

// warmUp bounds the warm-up search: long enough for the browser to compile
// the planner's hot code with its optimizing tier (a search's first second
// otherwise runs on the baseline tier, two to three times slower).
const warmUp = 1500 * time.Millisecond

// serveTune answers the Tune worker script (static/assets/kvscope-tune.js).
// The page runs one worker per core it may use (up to four), each searching
// one shard of the space (tune.Space.Shard):
//   - kvscopeTune(query, id, shard, shards) searches that shard of the
//     search an app URL's query describes, posting {type: "progress", id,
//     done, total} after each slice; shard 0 then waits for the others'
//     partials (kvscopePartial), merges them, ranks and posts {type:
//     "result", id, json, done, total, canceled, rank_ms, search_ms, chart,
//     summary, table} (an app.TuneOutcome as JSON, its figures again as
//     they are, its chart's option and its summary's and table's markup:
//     the page keeps those three and draws them by name, never copying
//     them into its WebAssembly, and decodes no JSON); the other
//     shards post {type: "partial", id, bytes} (a
//     tune.Search.Partial, for the page to hand to shard 0). Errors come
//     as {type: "error", id, error}.
//   - kvscopePartial(id, bytes) hands shard 0 another shard's partial;
//   - kvscopeCancel() stops the search under way between two candidates:
//     the shards still post what they evaluated, and the result ranks it;
//   - kvscopeWarm(query) runs the first candidates of that search for at
//     most warmUp, then ranks, charts and encodes what it evaluated as a
//     search's end does, keeping nothing, and posts {type: "ready"}.
//
// One search at a time: a new one (or a warm-up) abandons the last.
func serveTune(cat model.Catalog) {
	global := js.Global()
	perf := global.Get("performance")
	clock := func() time.Time { return time.Unix(0, int64(perf.Call("now").Float()*1e6)) }
	post := func(msg map[string]any) { global.Call("postMessage", msg) }
	cancel := context.CancelFunc(func() {})
	abandon := make(chan struct{})
	current := -1.0 // the id of the search under way
	partials := make(chan []byte, 64)
	turn := newEventTurn()
	start := func(query string, id float64, shard, shards int, warm bool) {
		cancel()
		close(abandon)
		abandon = make(chan struct{})
		for len(partials) > 0 {
			<-partials
		}
		current = id
		ctx, stop := context.WithCancel(context.Background())
		if warm {
			ctx, stop = context.WithTimeout(context.Background(), warmUp)
		}
		cancel = stop
		gone := abandon
		fail := func(text string) { post(map[string]any{"type": "error", "id": id, "error": text}) }
		go func() {
			defer stop()
			search, err := app.NewTuneSearch(query, cat, shard, shards)
			if err != nil {
				if warm {
					post(map[string]any{"type": "ready"})
				} else {
					fail(err.Error())
				}
				return
			}
			yield := turn.yield
			if warm {
				for !search.Done() && ctx.Err() == nil {
					search.Step(ctx, 64)
					yield()
				}
				// The end of a search too: ranking, charting and the
				// result's JSON. Run here first, their hot code is
				// compiled by the optimizing tier now, not on the page's
				// cores while it draws the first result (in a Chromium
				// trace, 40–100 ms of compiling there).
				for i := 0; i < 2 && ctx.Err() != context.Canceled; i++ {
					json.Marshal(app.TuneOutcomeOf(search, clock, false))
					yield()
				}
				if ctx.Err() != context.Canceled { // not cut short by a search
					post(map[string]any{"type": "ready"})
				}
				return
			}
			begin := clock()
			progress := func(done, total int) {
				post(map[string]any{"type": "progress", "id": id, "done": done, "total": total})
			}
			app.RunSlices(ctx, search, 100*time.Millisecond, clock, progress, yield)
			if shard > 0 {
				b := search.Partial()
				arr := js.Global().Get("Uint8Array").New(len(b))
				js.CopyBytesToJS(arr, b)
				post(map[string]any{"type": "partial", "id": id, "bytes": arr})
				return
			}
			for i := 1; i < shards; i++ {
				select {
				case b := <-partials:
					if err := search.Merge(b); err != nil {
						fail(err.Error())
						return
					}
				case <-gone:
					return
				}
			}
			out := app.TuneOutcomeOf(search, clock, ctx.Err() != nil)
			out.SearchMillis = float64(clock().Sub(begin).Microseconds()) / 1000
			b, err := json.Marshal(out)
			if err != nil {
				fail("tune: the result: " + err.Error())
				return
			}
			post(map[string]any{"type": "result", "id": id, "json": string(b), "done": out.Done, "total": out.Total, "canceled": out.Canceled,
				"rank_ms": out.RankMillis, "search_ms": out.SearchMillis, "chart": out.Chart, "summary": out.SummaryHTML, "table": out.TableHTML})
		}()
	}
	global.Set("kvscopeCancel", js.FuncOf(func(this js.Value, args []js.Value) any {
		cancel()
		return nil
	}))
	global.Set("kvscopeTune", js.FuncOf(func(this js.Value, args []js.Value) any {
		start(args[0].String(), args[1].Float(), args[2].Int(), args[3].Int(), false)
		return nil
	}))
	global.Set("kvscopePartial", js.FuncOf(func(this js.Value, args []js.Value) any {
		if args[0].Float() != current {
			return nil // a partial of a search abandoned since
		}
		b := make([]byte, args[1].Get("length").Int())
		js.CopyBytesToGo(b, args[1])
		select {
		case partials <- b:
		default: // more partials than shards: not a search's
		}
		return nil
	}))
	global.Set("kvscopeWarm", js.FuncOf(func(this js.Value, args []js.Value) any {
		start(args[0].String(), -1, 0, 1, true)
		return nil
	}))
	select {}
}

// eventTurn hands the worker's event loop its turn between two slices of
// a search, so that a message the page sent meanwhile (a cancel) is read.
// It waits for a message of its own through a MessageChannel: messages
// are one task source, run in the order they were sent, so every message
// the page sent before is read first. (A timer is no such promise: the
// browser may run it before a waiting message, slice after slice.)
type eventTurn struct {
	port js.Value
	back chan struct{}
}

func newEventTurn() *eventTurn {
	ch := js.Global().Get("MessageChannel").New()
	t := &eventTurn{port: ch.Get("port2"), back: make(chan struct{}, 1)}
	ch.Get("port1").Set("onmessage", js.FuncOf(func(js.Value, []js.Value) any {
		t.back <- struct{}{}
		return nil
	}))
	return t
}

func (t *eventTurn) yield() {
	t.port.Call("postMessage", nil)
	<-t.back
}
