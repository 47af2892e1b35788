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

// serveTune answers the Tune worker script (static/assets/kvscope-tune.js):
//   - kvscopeTune(query) runs the search an app URL's query describes and
//     posts {type: "progress", done, total} after each slice, then {type:
//     "result", json, chart} (an app.TuneOutcome and its chart's option) or
//     {type: "error", error};
//   - kvscopeCancel() stops the search under way between two candidates;
//     its result ranks what it evaluated;
//   - kvscopeWarm(query) runs the first candidates of that search for at
//     most warmUp, keeping nothing, then posts {type: "ready"}.
//
// One search at a time: a new one (or a warm-up) cancels the last.
func serveTune(cat model.Catalog) {
	global := js.Global()
	perf := global.Get("performance")
	clock := func() time.Time { return time.Unix(0, int64(perf.Call("now").Float()*1e6)) }
	post := func(msg map[string]any) { global.Call("postMessage", msg) }
	cancel := context.CancelFunc(func() {})
	start := func(query string, warm bool) {
		cancel()
		ctx, stop := context.WithCancel(context.Background())
		if warm {
			ctx, stop = context.WithTimeout(context.Background(), warmUp)
		}
		cancel = stop
		go func() {
			defer stop()
			search, err := app.NewTuneSearch(query, cat)
			if err != nil {
				if warm {
					post(map[string]any{"type": "ready"})
				} else {
					post(map[string]any{"type": "error", "error": err.Error()})
				}
				return
			}
			// Sleeping hands the worker's event loop its turn (a cancel
			// message is read there): a timer of a few milliseconds, so
			// the slices are long.
			yield := func() { time.Sleep(time.Millisecond) }
			if warm {
				for !search.Done() && ctx.Err() == nil {
					search.Step(ctx, 64)
					yield()
				}
				if ctx.Err() != context.Canceled { // not cut short by a search
					post(map[string]any{"type": "ready"})
				}
				return
			}
			progress := func(done, total int) { post(map[string]any{"type": "progress", "done": done, "total": total}) }
			out := app.RunTune(ctx, search, 100*time.Millisecond, clock, progress, yield)
			b, err := json.Marshal(out)
			if err != nil {
				post(map[string]any{"type": "error", "error": "tune: the result: " + err.Error()})
				return
			}
			post(map[string]any{"type": "result", "json": string(b), "chart": out.Chart})
		}()
	}
	global.Set("kvscopeCancel", js.FuncOf(func(this js.Value, args []js.Value) any {
		cancel()
		return nil
	}))
	global.Set("kvscopeTune", js.FuncOf(func(this js.Value, args []js.Value) any {
		start(args[0].String(), false)
		return nil
	}))
	global.Set("kvscopeWarm", js.FuncOf(func(this js.Value, args []js.Value) any {
		start(args[0].String(), true)
		return nil
	}))
	select {}
}
