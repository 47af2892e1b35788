package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// runReplay serves the app with no agent and plays a recording into the
// hub at its recorded pace (or faster), so the live view shows it as it
// happened.
func runReplay(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	speed := fs.Float64("speed", 1, "playback speed: 2 plays twice as fast; 0 plays without pauses")
	token := fs.String("token", "", "the token browsers and scripts need (as for kvscope serve); required to listen beyond loopback")
	natsURL := fs.String("nats", "", "play a range of the event log instead of a file: the cluster's nats://HOST:PORT[,…]")
	from := fs.Uint64("from", 1, "with --nats: the first stream sequence number to play")
	through := fs.Uint64("through", 0, "with --nats: the last stream sequence number to play (0: the end)")
	var auth stream.NATSAuth
	auth.Flags(fs, "a NATS credentials file for --nats")
	files, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if (len(files) == 1) == (*natsURL != "") || len(files) > 1 {
		return &usageError{fmt.Errorf("give one recording or --nats: kvscope replay [--speed S] [--addr A] FILE.jsonl | --nats URL [--from N] [--through N]")}
	}
	if *speed < 0 {
		return &usageError{fmt.Errorf("--speed %v: must not be negative", *speed)}
	}
	// Both sources are streamed as they play: a file, or the event log
	// read replayChunk events at a time.
	var next func() (event.Event, error)
	source, count := "", ""
	if *natsURL != "" {
		auth.Password = os.Getenv("KVSCOPE_NATS_PASSWORD")
		b, err := eventlog.Open(context.Background(), eventlog.Options{URLs: *natsURL, Auth: auth, ReadOnly: true})
		if err != nil {
			return err
		}
		defer b.Close()
		next = b.Events(context.Background(), *from, *through, replayChunk)
		source, count = fmt.Sprintf("stream %s on %s from message %d", eventlog.StreamName, eventlog.Redact(*natsURL), *from), "the"
	} else {
		// A recording may be larger than memory: it is read once here to
		// check every line (an error names the line before anything is
		// served), then streamed from the file as it plays.
		n, err := checkRecording(files[0])
		if err != nil {
			return err
		}
		source, count = files[0], strconv.Itoa(n)
	}
	// serve's listen rules: beyond loopback only with a token, which then
	// guards every route. No agent connects to a replay.
	o := serveOptions{Addr: *addr, Agent: "none", Token: *token, RequireToken: *token != "", Logf: log.New(stdout, "kvscope: ", log.LstdFlags).Printf}
	if err := o.check(); err != nil {
		return &usageError{err}
	}
	if o.Token == "" {
		o.Token = randomToken()
	}
	srv := newServer(catalog(), o, nil)
	return srv.listenAndServe(o, func(ctx context.Context, _ string) {
		o.Logf("replaying %s events from %s at %gx", count, source, *speed)
		go func() {
			publish := func(f []event.Event) { srv.hub.Publish(f) }
			var err error
			if next != nil {
				if err = live.Play(ctx, next, *speed, publish); err != nil {
					err = fmt.Errorf("--nats %s, stream messages from %d: %w", eventlog.Redact(*natsURL), *from, err)
				}
			} else {
				err = playRecording(ctx, files[0], *speed, publish)
			}
			if err != nil && ctx.Err() == nil {
				o.Logf("replay stopped: %v", err)
				return
			}
			o.Logf("replay done; still serving")
		}()
	})
}

// replayChunk is the events replay --nats reads from the event log at a
// time (it holds one chunk).
const replayChunk = 10_000
