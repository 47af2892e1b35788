//go:build nixl && cgo

package nixltest

import (
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// Pull moves one 300-token request of gpt-oss-20b from P at TP 2 to D at
// TP 4 through a real NIXL agent named agent (its rings, where
// NIXL_TELEMETRY_DIR is set, are agent-P's and agent-D's), proves it exact
// on bytes and returns the transfer and NIXL's completion of it. It fails
// t on any error.
func Pull(t testing.TB, agent string) (*xfer.Transfer, *transfer.Stats) {
	t.Helper()
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	e := func(tp int) plan.Engine {
		return plan.Engine{TensorParallelSize: tp, KVCacheMemoryBytes: 32 << 20, MaxModelLen: 1024}
	}
	conn, _ := xfer.ParseConnector("nixl")
	pd, err := xfer.Run(xfer.Setup{Model: m, P: e(2), D: e(4), Connector: conn, Request: xfer.Request{PromptTokens: 300}, KeepPairs: true})
	if err != nil {
		t.Fatal(err)
	}
	x := pd.Transfer
	b, err := transfer.NewNIXL(agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Register(append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)); err != nil {
		t.Fatal(err)
	}
	md, _ := b.Metadata()
	if err := b.LoadRemote(md); err != nil {
		t.Fatal(err)
	}
	v, st := Move(t, b, m, x, agent+":done")
	if v != oracle.Exact {
		t.Fatalf("verdict %s", v)
	}
	return x, st
}

// Move runs x through backend b, each request carrying notif, and returns
// the oracle's verdict on the bytes and the backend's statistics. It
// fails t on any error.
func Move(t testing.TB, b transfer.Backend, m *model.Model, x *xfer.Transfer, notif string) (oracle.Verdict, *transfer.Stats) {
	t.Helper()
	prover, err := oracle.NewProver(m, x, b, false)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Prepare(x)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.Post(p, notif)
	if err != nil {
		t.Fatal(err)
	}
	st, err := transfer.WaitFor(b, h, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return prover.Verify().Verdict, st
}
