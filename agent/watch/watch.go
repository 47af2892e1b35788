package watch

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Transfer is one completed NIXL request as an agent's telemetry records
// it: NIXL v1.3.1+ appends, under one lock, its post time, its transfer
// time, its bytes and a request count of 1 (TX for a WRITE the agent
// initiated, RX for a READ: vLLM's D pulls, so KV transfers are RX in the
// decode workers' rings). Grouping these into one record is kvscope's
// reading of NIXL's code (telemetry.cpp addXferStats), not a field NIXL
// writes.
type Transfer struct {
	Dir    string // "tx" or "rx"
	Bytes  uint64
	PostUS uint64 // NIXL's agent_xfer_post_time
	XferUS uint64 // NIXL's agent_xfer_time (start to completion)
}

// Observation is what a ring said, one of: a request posted, a transfer, memory
// (de)registered, an error, events NIXL dropped, or the ring opening,
// closing or being refused; or a file of the directory skipped (not a
// regular file, or over MaxRings), once per file.
type Observation struct {
	Agent    string // the NIXL agent: the ring file's name
	Kind     string // posted, transfer, registered, deregistered, error, dropped, opened, closed, refused, skipped
	Transfer *Transfer
	Bytes    uint64 // registered, deregistered
	Status   string // error: NIXL's status name (ERR_BACKEND, ...)
	Count    uint64 // dropped: events; error: occurrences
	Version  int32  // opened: the ring's telemetry version
	Err      error  // refused, closed, skipped
}

// assembler groups one ring's events into observations.
type assembler struct {
	agent            string
	post, xfer, size uint64
	dir              string
	havePost, haveX  bool
	haveBytes        bool
}

func (a *assembler) add(r Raw) []Observation {
	obs := func(o Observation) []Observation {
		o.Agent = a.agent
		return []Observation{o}
	}
	switch r.Type {
	case "agent_xfer_post_time":
		// NIXL v1.0.1 (telemetry version 1) writes it when the request
		// is posted, the rest when it completes: till then the request
		// is in flight. From v1.3.1 all four come together at completion,
		// so a request that never completes is not in the ring at all.
		a.post, a.havePost = r.Value, true
		return obs(Observation{Kind: "posted", Transfer: &Transfer{PostUS: r.Value}})
	case "agent_xfer_time":
		a.xfer, a.haveX = r.Value, true
	case "agent_tx_bytes", "agent_rx_bytes":
		a.size, a.haveBytes, a.dir = r.Value, true, r.Type[6:8]
	case "agent_tx_requests_num", "agent_rx_requests_num":
		if !a.haveBytes { // the ring lost the start of this request's events
			*a = assembler{agent: a.agent}
			return nil
		}
		t := &Transfer{Dir: a.dir, Bytes: a.size, PostUS: a.post, XferUS: a.xfer}
		*a = assembler{agent: a.agent}
		return obs(Observation{Kind: "transfer", Transfer: t})
	case "agent_memory_registered":
		return obs(Observation{Kind: "registered", Bytes: r.Value})
	case "agent_memory_deregistered":
		return obs(Observation{Kind: "deregistered", Bytes: r.Value})
	case "agent_telemetry_events_dropped":
		return obs(Observation{Kind: "dropped", Count: r.Value})
	default:
		if status, ok := strings.CutPrefix(r.Type, "agent_err_"); ok {
			return obs(Observation{Kind: "error", Status: "ERR_" + strings.ToUpper(status), Count: max(r.Value, 1)})
		}
	}
	return nil
}

// Watcher follows a NIXL telemetry directory: every ring file in it, new
// ones as engines start, closing one that is removed or replaced (an agent
// restarting under its name). It never removes a file.
//
// It is the rings' reader: it advances each ring's read position, so it
// must be the only one (Run locks the directory; a second watcher is
// refused, and NIXL's own example readers must not run beside it). Events
// written while nobody reads stay in the ring until it is full; after that
// NIXL drops the new ones, uncounted, so a watcher that starts late first
// reads the oldest capacity-1 events, then the live ones.
type Watcher struct {
	Dir      string
	Interval time.Duration // how often the rings are read (default 100 ms, NIXL's flush period)
	Rescan   time.Duration // how often the directory is listed (default 1 s)
	// MaxDrain bounds the events read from one ring per interval (default
	// 65,536): a ring that fills faster is read over several intervals.
	MaxDrain int
	// MaxRings bounds the rings open at once (default DefaultMaxRings):
	// a file beyond it is skipped, reported once, and opened when a ring
	// closes and the directory is listed again.
	MaxRings int
}

// DefaultMaxRings is Watcher.MaxRings when none is given: 256 NIXL agents
// (a host of eight GPUs runs a handful).
const DefaultMaxRings = 256

type open struct {
	ring *Ring
	asm  assembler
}

// Run reads the directory until ctx ends, handing every observation to
// emit (from this goroutine). A ring it cannot read is reported once, as
// refused, and the others are read on.
func (w *Watcher) Run(ctx context.Context, emit func(Observation)) error {
	unlock, err := lockDir(w.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	interval, rescan, maxDrain, maxRings := w.Interval, w.Rescan, w.MaxDrain, w.MaxRings
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if rescan <= 0 {
		rescan = time.Second
	}
	if maxDrain <= 0 {
		maxDrain = 1 << 16
	}
	if maxRings <= 0 {
		maxRings = DefaultMaxRings
	}
	d := &dirState{rings: map[string]*open{}, refused: map[string]string{}, skipped: map[string]string{}, maxRings: maxRings}
	rings := d.rings
	defer func() {
		for _, o := range rings {
			o.ring.Close()
		}
	}()
	var lastScan time.Time
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if time.Since(lastScan) >= rescan {
			lastScan = time.Now()
			w.scan(d, emit)
		}
		names := make([]string, 0, len(rings))
		for n := range rings {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			o := rings[name]
			events, bad, err := o.ring.Drain(maxDrain)
			if err != nil {
				o.ring.Close()
				delete(rings, name)
				emit(Observation{Agent: name, Kind: "closed", Err: err})
				continue
			}
			for _, e := range events {
				for _, ob := range o.asm.add(e) {
					emit(ob)
				}
			}
			if bad > 0 {
				emit(Observation{Agent: name, Kind: "error", Status: "ERR_UNKNOWN", Count: uint64(bad),
					Err: fmt.Errorf("%d events of %s did not decode", bad, name)})
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// dirState is what Run knows of the directory between listings.
type dirState struct {
	rings    map[string]*open
	refused  map[string]string // name -> the size and time it was refused at
	skipped  map[string]string // name -> why it was skipped (reported once)
	maxRings int
}

// scan opens new ring files and closes those removed or replaced. A file
// that is no ring to open (a symlink, FIFO, directory, socket or device,
// or one over maxRings) is reported once as skipped, and again only when
// the reason changes; names no longer listed are forgotten, so what is
// remembered stays the size of the directory.
func (w *Watcher) scan(d *dirState, emit func(Observation)) {
	rings, refused := d.rings, d.refused
	for name, o := range rings {
		if !o.ring.Same() {
			o.ring.Close()
			delete(rings, name)
			emit(Observation{Agent: name, Kind: "closed", Err: fmt.Errorf("%s was removed or replaced", name)})
		}
	}
	entries, err := os.ReadDir(w.Dir)
	if err != nil {
		if d.skipped[dirKey] != err.Error() {
			emit(Observation{Agent: w.Dir, Kind: "skipped", Err: fmt.Errorf("watch: listing %s: %w", w.Dir, err)})
		}
		d.skipped[dirKey] = err.Error()
		return
	}
	delete(d.skipped, dirKey)
	listed := make(map[string]bool, len(entries))
	skip := func(name, why string) {
		if d.skipped[name] != why {
			d.skipped[name] = why
			emit(Observation{Agent: name, Kind: "skipped", Err: fmt.Errorf("watch: %s: %s", filepath.Join(w.Dir, name), why)})
		}
	}
	for _, e := range entries {
		name := e.Name()
		listed[name] = true
		if _, ok := rings[name]; ok || strings.HasPrefix(name, ".") {
			continue
		}
		if t := e.Type(); !t.IsRegular() {
			skip(name, "not read: "+fileKind(t)+", not a regular file (a NIXL ring is one)")
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		stamp := fmt.Sprint(info.Size(), info.ModTime().UnixNano())
		if refused[name] == stamp {
			continue // refused already, and unchanged
		}
		if len(rings) >= d.maxRings {
			skip(name, fmt.Sprintf("not opened: %d rings are open, the most this watcher reads (--max-agents)", d.maxRings))
			continue
		}
		r, err := OpenRing(filepath.Join(w.Dir, name))
		if err != nil {
			refused[name] = stamp
			emit(Observation{Agent: name, Kind: "refused", Err: err})
			continue
		}
		delete(refused, name)
		delete(d.skipped, name)
		rings[name] = &open{ring: r, asm: assembler{agent: name}}
		emit(Observation{Agent: name, Kind: "opened", Version: r.Header().Version})
	}
	for name := range refused {
		if !listed[name] {
			delete(refused, name)
		}
	}
	for name := range d.skipped {
		if !listed[name] && name != dirKey {
			delete(d.skipped, name)
		}
	}
}

// dirKey is dirState.skipped's key for the directory itself (no file's
// name holds a NUL).
const dirKey = "\x00"

// fileKind names a directory entry's type.
func fileKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "a symbolic link (not followed)"
	case t.IsDir():
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	}
	return fmt.Sprintf("a file of type %s", t.Type())
}
