package event

// MaxStateEvents and MaxStateBytes bound the state events kept of one
// agent (State): in events, and in bytes of their encodings.
const (
	MaxStateEvents = 64
	MaxStateBytes  = 256 << 10
)

// Encoded is an event with its JSON (as Encode writes it), kept together
// so that whatever carries the event reuses the bytes.
type Encoded struct {
	Event Event
	Raw   []byte
}

// IsState reports whether events of kind k describe an agent rather than
// a moment (its hello, handshakes and registrations): the kinds State
// keeps.
func IsState(k Kind) bool { return k == Hello || k == Handshake || k == Registration }

// State keeps the events that describe an agent rather than a moment (its
// hello and its latest handshakes and registrations), so that whoever
// learns of the agent late still learns who it is: a browser subscribing
// long after the agent started, or a server that restarted and lost them.
// A hello starts the list again; past MaxStateEvents events or
// MaxStateBytes bytes of encodings, the oldest after the first goes (the
// first, the hello, and the newest always stay). Both the agent's
// streamer and the server's hub keep one per agent.
//
// The list is never written in place: a slice List returned stays as it
// was, whatever is kept afterwards. The zero value is empty. A State is
// not safe for concurrent use.
type State struct {
	list []Encoded
}

// Keep keeps e, with its encoding raw (nil counts as no bytes), if it is
// a state event, and reports whether it was one.
func (s *State) Keep(e Event, raw []byte) bool {
	switch e.Kind {
	case Hello:
		s.list = []Encoded{{e, raw}}
	case Handshake, Registration:
		list := append(s.list, Encoded{e, raw}) // past what any List returned reaches
		size := 0
		for _, x := range list {
			size += len(x.Raw)
		}
		drop := 0
		for len(list)-drop > 2 && (len(list)-drop > MaxStateEvents || size > MaxStateBytes) {
			size -= len(list[1+drop].Raw)
			drop++
		}
		if drop > 0 { // a new array: what List returned keeps its own
			list = append(append(make([]Encoded, 0, len(list)-drop), list[0]), list[1+drop:]...)
		}
		s.list = list
	default:
		return false
	}
	return true
}

// List is the state events kept, oldest first. Do not modify it.
func (s *State) List() []Encoded { return s.list[:len(s.list):len(s.list)] }

// Len is the number of state events kept.
func (s *State) Len() int { return len(s.list) }
