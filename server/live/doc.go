// Package live is kvscope's live half: the hub that takes agents' events
// over websockets and fans them out to browsers, the event log it stores
// them in (package eventlog, on NATS JetStream), the fleet summary every
// browser gets once a second, and the recording and replay of events.
//
// A server makes one Hub with New, mounts its two handlers and closes it
// when it stops:
//
//	h := live.New(live.Options{Metrics: reg, Log: log, Record: file})
//	mux.Handle("/ws/agent", h.AgentHandler(token))
//	mux.Handle("/ws/live", h.LiveHandler())
//	defer h.Close()
//
// Agents (agent/stream) send frames of events on /ws/agent with a bearer
// token; each frame is acknowledged with the last sequence number stored
// for the agent, on connecting too, so an agent resumes after what the
// server holds and the only gaps a browser can see are the drops the
// agent counted. Browsers subscribe read-only on /ws/live: first
// {"history": N} and N frames of history (each agent's hello,
// handshakes and registrations, then its recent events, each agent whole
// in one frame), then the live frames. With an event log a returning
// browser resumes from the log (?since=N) and a slow one is told to;
// without one a slow browser loses its oldest frames.
//
// What the hub guarantees: publishing never blocks on a browser, a file
// or the network while holding the lock that agents and browsers wait on
// (the event log is written, and history packed, with it released; the
// recording is queued for a bounded writer of its own); everything it
// keeps is bounded (2,048 recent events and 8 MiB, per agent
// event.MaxStateEvents state events and event.MaxStateBytes, per browser
// DefaultSubscriberQueue frames and 8 MiB, per recording
// DefaultRecordQueue events); every drop is counted on /metrics; and an
// agent with no connection for an hour is forgotten. README.md beside
// this file describes the live path, the fleet and its security rules.
//
// Non-goals: the package reads no flags (kvscope serve turns them into
// Options), serves no app and checks no Host, cookie or API rule (the
// server's access rules sit in front of these handlers); frames, their
// limits and what an agent's state is are core/event's.
package live
