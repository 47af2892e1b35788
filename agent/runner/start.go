package runner

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/kvscope/kvscope/agent/gpu"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/model"
)

// Config is a whole agent: a scenario, a backend and where to stream.
type Config struct {
	Name      string // the agent's name on its events (default: the host name)
	Scenario  scenario.Scenario
	Catalog   model.Catalog
	ServerURL string // ws://host:port/ws/agent
	Token     string
	Backend   string // host (default) or nixl
	HostLimit int64  // bytes the host backend may allocate (default 1 GiB)
	Metrics   *metrics.Registry
	Logf      func(format string, args ...any)
	// Streamer, when set, is used instead of a new one (tests).
	Streamer *stream.Streamer
}

// Start discovers GPUs, plans the scenario, and runs the runner and the
// streamer until ctx ends or the scenario is over (the streamer then keeps
// sending what is queued until ctx ends).
func Start(ctx context.Context, c Config) error {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.HostLimit == 0 {
		c.HostLimit = 1 << 30
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	m, err := c.Scenario.LoadModel(c.Catalog)
	if err != nil {
		return err
	}
	gpus := gpu.Discover()
	if gpus.Reason != "" {
		logf("GPUs: %s", gpus.Reason)
	}
	kinds := map[string]string{}
	for _, l := range m.Layers {
		kinds[l.Name] = string(l.Kind)
	}
	var be transfer.Backend
	switch c.Backend {
	case "", "host":
		be = transfer.NewHost(c.HostLimit, func(name string) string { return kinds[name] })
	case "nixl":
		if be, err = transfer.NewNIXL(c.Name, kinds); err != nil {
			return err
		}
	default:
		return fmt.Errorf("agent: --backend %q: want host or nixl", c.Backend)
	}
	defer be.Close()
	st := c.Streamer
	if st == nil {
		st = &stream.Streamer{Agent: c.Name, URL: c.ServerURL, Token: c.Token, Logf: logf}
	}
	r := &Runner{Scenario: c.Scenario, Model: m, Backend: be, Sink: st, Metrics: c.Metrics, GPUs: gpus.GPUs, NoGPU: gpus.Reason, Role: "both", Logf: logf}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		st.Run(ctx)
	}()
	err = r.Run(ctx)
	if err != nil {
		logf("agent: %v", err)
	}
	wg.Wait()
	return err
}
