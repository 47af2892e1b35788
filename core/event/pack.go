package event

// MaxEventBytes is the largest encoded event a frame can carry: a frame
// of it alone, with its brackets, is MaxFrameBytes.
const MaxEventBytes = MaxFrameBytes - 2

// Packer packs encoded events, in order, into frames within a browser's
// and a server's limits (MaxFrameBytes, MaxFrameEvents). A part is one
// encoded event, or a run of them joined by commas (the inside of a
// frame), with the number of events it holds. The agent's streamer, the
// hub's live and history frames and the event log's messages are all
// packed by it. The zero value is an empty packer; it is not safe for
// concurrent use.
type Packer struct {
	parts  [][]byte
	size   int // the frame's bytes so far: its brackets and each part with a separator
	events int
}

// Size is the bytes of the frame packed so far, counted with a
// separator after each part (one more than the frame will have once
// there is a part).
func (p *Packer) Size() int {
	if p.size == 0 {
		return 2
	}
	return p.size
}

// Events is the number of events packed so far.
func (p *Packer) Events() int { return p.events }

// Fits reports whether a part of n bytes holding events events joins the
// frame being packed within both limits. Any part fits an empty packer
// (whether it fits a frame at all is the caller's to check:
// MaxEventBytes).
func (p *Packer) Fits(n, events int) bool {
	return p.events == 0 || p.Size()+n+1 <= MaxFrameBytes && p.events+events <= MaxFrameEvents
}

// Add appends a part holding events events to the frame being packed.
func (p *Packer) Add(part []byte, events int) {
	p.count(len(part), events)
	p.parts = append(p.parts, part)
}

// count accounts for a part of n bytes holding events events.
func (p *Packer) count(n, events int) {
	p.size = p.Size() + n + 1
	p.events += events
}

// Frame returns the frame packed so far (nil when it is empty) and the
// events it holds, and starts an empty one.
func (p *Packer) Frame() ([]byte, int) {
	if len(p.parts) == 0 {
		return nil, 0
	}
	frame, n := JoinFrame(p.parts), p.events
	clear(p.parts) // the frame holds a copy
	p.parts, p.size, p.events = p.parts[:0], 0, 0
	return frame, n
}

// Pack packs encoded events, in order, into as few frames as the limits
// allow (each frame as full as it can be), and says how many events each
// frame holds. An event larger than MaxEventBytes gets a frame of its
// own, which passes MaxFrameBytes: leave such events out first.
func Pack(events [][]byte) (frames [][]byte, counts []int) {
	var p Packer
	for _, e := range events {
		if !p.Fits(len(e), 1) {
			f, n := p.Frame()
			frames, counts = append(frames, f), append(counts, n)
		}
		p.Add(e, 1)
	}
	if f, n := p.Frame(); f != nil {
		frames, counts = append(frames, f), append(counts, n)
	}
	return frames, counts
}

// Fit is how many of events, from the first, one frame takes (as Pack
// would pack its first frame): 0 only when there are none, or when the
// first is larger than MaxEventBytes.
func Fit(events [][]byte) int {
	if len(events) == 0 || len(events[0]) > MaxEventBytes {
		return 0
	}
	var p Packer
	n := 0
	for n < len(events) && p.Fits(len(events[n]), 1) {
		p.count(len(events[n]), 1)
		n++
	}
	return n
}
