package eventlog

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/kvscope/kvscope/core/event"
)

// Detail on demand rides core NATS beside the stream, never stored
// (server/live's detail.go says who sends what when): agents' detail on
// event.DetailSubject, and the word that a browser draws an agent on
// event.WatchSubject and event.WatchAll.

// Watch says that a browser of this replica draws agent's detail.
func (l *Log) Watch(agent string) { l.nc.Publish(event.WatchSubject(agent), nil) }

// WatchAll says that a browser of this replica draws every agent's detail.
func (l *Log) WatchAll() { l.nc.Publish(event.WatchAll, nil) }

// PublishDetail sends a frame of agent's detail to every replica that
// draws it (core NATS: at most once, not stored).
func (l *Log) PublishDetail(agent string, frame []byte) error {
	return l.nc.Publish(event.DetailSubject(agent), frame)
}

// Detail hears, until ctx ends, every word that a browser draws an agent
// (watched: the agent, or all for every agent) and every frame of detail
// (detail, with the agent its subject names; a subject that names none is
// dropped). NATS renews the subscriptions after a reconnect.
//
// A replica that starts asks on event.WatchAsk, and every replica hearing
// that (asked) says at once what its browsers draw: a restarted replica
// learns within a round trip whether the agents that reconnect to it are
// drawn.
func (l *Log) Detail(ctx context.Context, watched func(agent string, all bool), asked func(), detail func(agent string, frame []byte)) error {
	var subs []*nats.Subscription
	for subject, fn := range map[string]nats.MsgHandler{
		event.WatchPrefix + ">": func(m *nats.Msg) {
			if agent, err := event.AgentOfWatch(m.Subject); err == nil {
				watched(agent, false)
			}
		},
		event.WatchAll: func(*nats.Msg) { watched("", true) },
		event.WatchAsk: func(*nats.Msg) { asked() },
		event.DetailPrefix + ">": func(m *nats.Msg) {
			if agent, err := event.AgentOfDetail(m.Subject); err == nil {
				detail(agent, m.Data)
			}
		},
	} {
		sub, err := l.nc.Subscribe(subject, fn)
		if err != nil {
			for _, s := range subs {
				s.Unsubscribe()
			}
			return err
		}
		// A slow replica drops detail rather than stall NATS (the browsers
		// see the jump in dseq): 64 MiB and 64k messages pending at most.
		sub.SetPendingLimits(64<<10, 64<<20)
		subs = append(subs, sub)
	}
	l.Ask()
	context.AfterFunc(ctx, func() {
		for _, s := range subs {
			s.Unsubscribe()
		}
	})
	return nil
}

// Ask asks every replica to say at once what its browsers draw.
func (l *Log) Ask() { l.nc.Publish(event.WatchAsk, nil) }
