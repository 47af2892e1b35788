package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kvscope/kvscope/server/live/eventlog"
)

// natsFlags registers the event log's flags on fs; the returned function
// reads them once parsed into the log's options.
func natsFlags(fs *flag.FlagSet) func() (eventlog.Options, error) {
	var o eventlog.Options
	fs.StringVar(&o.URLs, "nats", "", "an external NATS cluster, nats://HOST:PORT[,…] (default: an embedded NATS server with JetStream, loopback only)")
	fs.StringVar(&o.DataDir, "data-dir", eventlog.DefaultDataDir(), "where the embedded NATS server keeps the event log")
	fs.StringVar(&o.Listen, "nats-listen", "", "the embedded NATS server's client address, loopback (default: a free port)")
	o.Auth.Flags(fs, "a NATS credentials file (JWT and nkey seed) for --nats")
	fs.DurationVar(&o.MaxAge, "retention-age", 24*time.Hour, "how long the event log keeps events")
	bytes := fs.String("retention-bytes", "1GiB", "how much the event log keeps (oldest go first)")
	fs.IntVar(&o.Replicas, "stream-replicas", 1, "the stream's replicas in a NATS cluster (3 for an R3 stream)")
	fs.IntVar(&o.MaxConnections, "nats-max-connections", eventlog.DefaultMaxConnections, "client connections the embedded NATS server takes at once")
	fs.IntVar(&o.MaxAgentConnections, "nats-agent-connections", eventlog.DefaultMaxAgentConnections, "connections one agent's credential may hold to the embedded NATS server at once")
	fs.Int64Var(&o.MaxFramesPerAgent, "retention-agent-frames", eventlog.DefaultMaxFramesPerAgent, "frames the event log keeps of one agent (its oldest go first), so one agent cannot evict the others' history")
	return func() (eventlog.Options, error) {
		var err error
		if o.MaxBytes, err = parseBytes(*bytes); err != nil || o.MaxBytes < 1<<20 {
			return o, fmt.Errorf("--retention-bytes %q: want a size of at least 1MiB", *bytes)
		}
		if o.MaxAge < time.Minute {
			return o, fmt.Errorf("--retention-age %s: must be at least 1m", o.MaxAge)
		}
		if o.Replicas < 1 || o.Replicas > 5 {
			return o, fmt.Errorf("--stream-replicas %d: must be between 1 and 5", o.Replicas)
		}
		if o.MaxConnections < 8 || o.MaxConnections > 1<<20 {
			return o, fmt.Errorf("--nats-max-connections %d: must be between 8 and 1048576", o.MaxConnections)
		}
		if o.MaxAgentConnections < 1 || o.MaxAgentConnections > o.MaxConnections {
			return o, fmt.Errorf("--nats-agent-connections %d: must be between 1 and --nats-max-connections (%d)", o.MaxAgentConnections, o.MaxConnections)
		}
		if o.MaxFramesPerAgent < 1000 {
			return o, fmt.Errorf("--retention-agent-frames %d: must be at least 1000", o.MaxFramesPerAgent)
		}
		if o.URLs != "" && o.Listen != "" {
			return o, errors.New("--nats-listen is the embedded server's: it does not go with --nats")
		}
		o.Auth.Password = os.Getenv("KVSCOPE_NATS_PASSWORD")
		return o, nil
	}
}
