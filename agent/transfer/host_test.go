package transfer

import (
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// deployment is a P/D setup small enough for host memory.
type deployment struct {
	name      string
	model     string
	pTP, dTP  int
	mem       int64
	connector string
	req       xfer.Request
}

var deployments = []deployment{
	{"gpt-oss pull TP2->TP4", "openai__gpt-oss-20b", 2, 4, 32 << 20, "nixl", xfer.Request{PromptTokens: 1000, PrefixHitTokens: 256}},
	{"gpt-oss push TP4->TP2", "openai__gpt-oss-20b", 4, 2, 32 << 20, "nixl-push", xfer.Request{PromptTokens: 777}},
	{"Qwen3.5 GDN hybrid TP1->TP2", "Qwen__Qwen3.5-0.8B", 1, 2, 64 << 20, "nixl", xfer.Request{PromptTokens: 600, PrefixHitTokens: 100}},
	{"Gemma-3 sliding TP1->TP1", "google__gemma-3-1b-it", 1, 1, 32 << 20, "nixl", xfer.Request{PromptTokens: 900}},
}

func prepare(t testing.TB, d deployment) (*model.Model, *xfer.PD, *xfer.Transfer) {
	t.Helper()
	m := modeltest.Load(t, d.model)
	c, err := xfer.ParseConnector(d.connector)
	if err != nil {
		t.Fatal(err)
	}
	e := func(tp int) plan.Engine {
		return plan.Engine{TensorParallelSize: tp, KVCacheMemoryBytes: d.mem, MaxModelLen: 1024}
	}
	pd, err := xfer.Prepare(xfer.Setup{Model: m, P: e(d.pTP), D: e(d.dTP), Connector: c, KeepPairs: true})
	if err != nil {
		t.Fatal(err)
	}
	x, err := pd.Compute(d.req, true)
	if err != nil {
		t.Fatal(err)
	}
	if x.Rejection != nil {
		t.Fatalf("%s: rejected: %v", d.name, x.Rejection)
	}
	return m, pd, x
}

func allRegs(x *xfer.Transfer) []*xfer.Registration {
	return append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)
}

// TestHostMovesEveryByte runs real transfers through the host backend and
// proves D's bytes with the oracle.
func TestHostMovesEveryByte(t *testing.T) {
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			m, _, x := prepare(t, d)
			h := NewHost(1<<30, nil)
			defer h.Close()
			if err := h.Register(allRegs(x)); err != nil {
				t.Fatal(err)
			}
			prover, err := oracle.NewProver(m, x, h, false)
			if err != nil {
				t.Fatal(err)
			}
			// Before the copy D holds only the sentinel: the oracle must
			// say so, or it proves nothing after.
			if res := prover.Verify(); res.Verdict != oracle.Wrong {
				t.Fatalf("before the transfer the oracle says %s, want wrong", res.Verdict)
			}
			p, err := h.Prepare(x)
			if err != nil {
				t.Fatal(err)
			}
			id, err := h.Post(p, "req:done")
			if err != nil {
				t.Fatal(err)
			}
			st, err := Wait(h, id)
			if err != nil {
				t.Fatal(err)
			}
			if res := prover.Verify(); res.Verdict != oracle.Exact {
				t.Fatalf("after the transfer: %s (%v)", res.Verdict, res.Mismatch)
			}
			if st.Bytes != x.Bytes || st.Descs != x.Descs || st.Merged != x.Merged {
				t.Errorf("stats bytes/descs/merged = %d/%d/%d, transfer has %d/%d/%d", st.Bytes, st.Descs, st.Merged, x.Bytes, x.Descs, x.Merged)
			}
			var bytes int64
			descs := 0
			for _, b := range st.Batches {
				bytes += b.Bytes
				descs += b.Descs
				if b.Timing != event.Measured || b.EndNS < b.StartNS {
					t.Fatalf("batch %+v: want a measured, ordered interval", b)
				}
			}
			if bytes != x.Bytes || descs != x.Descs {
				t.Errorf("batches carry %d bytes / %d descriptors, want %d / %d", bytes, descs, x.Bytes, x.Descs)
			}
			if st.Timing != event.Measured || st.TransferUS <= 0 || st.GBps() <= 0 {
				t.Errorf("stats timing %s, %v µs, %v GB/s", st.Timing, st.TransferUS, st.GBps())
			}
			if n := h.Notifications(); len(n) != 1 || n[0] != "req:done" {
				t.Errorf("notifications %q, want [req:done]", n)
			}
		})
	}
}

// TestHostRejectsOutOfRange: a descriptor outside a registered region, or
// naming a rank or region that does not exist, is refused before any byte
// moves.
func TestHostRejectsOutOfRange(t *testing.T) {
	mutations := []struct {
		name string
		edit func(x *xfer.Transfer)
		want string
	}{
		{"src past its region", func(x *xfer.Transfer) {
			p := &x.RankPairs[0].Pairs[0]
			p.Src.Offset = x.PRegs[x.RankPairs[0].P].Regions[p.Src.Region].Bytes() - p.Len + 1
		}, "outside"},
		{"dst negative", func(x *xfer.Transfer) { x.RankPairs[0].Pairs[3].Dst.Offset = -4096 }, "outside"},
		{"zero length", func(x *xfer.Transfer) { x.RankPairs[0].Pairs[1].Len = 0 }, "outside"},
		{"no such region", func(x *xfer.Transfer) { x.RankPairs[0].Pairs[0].Dst.Region = 999 }, "no region 999"},
		{"no such rank", func(x *xfer.Transfer) { x.RankPairs[0].P = 7 }, "P rank 7 is not registered"},
	}
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			_, _, x := prepare(t, deployments[0])
			h := NewHost(1<<30, nil)
			if err := h.Register(allRegs(x)); err != nil {
				t.Fatal(err)
			}
			mu.edit(x)
			_, err := h.Prepare(x)
			if err == nil || !strings.Contains(err.Error(), mu.want) {
				t.Fatalf("Prepare = %v, want an error containing %q", err, mu.want)
			}
		})
	}
}

func TestHostMemoryLimit(t *testing.T) {
	_, _, x := prepare(t, deployments[0])
	h := NewHost(8<<20, nil)
	err := h.Register(allRegs(x))
	if err == nil || !strings.Contains(err.Error(), "exceed the host backend's 8 MiB") {
		t.Fatalf("Register = %v, want the limit named", err)
	}
}
