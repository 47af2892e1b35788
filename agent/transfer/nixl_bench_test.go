//go:build nixl && cgo

package transfer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/xfer"
)

// A nixlbench-style table for the nixl backend: for page sizes 4 KiB to
// 1 MiB and batch sizes 1 to 1024 descriptors (at most 64 MiB a request),
// one request of batch descriptors at a time, D READing from P:
//
//   - one process: both NIXL agents here (UCX_TLS as the environment says);
//   - two processes: P's agent in a child process (this test binary, see
//     TestMain) and D's here, over UCX_TLS=tcp,self and tcp,shm,self, the
//     metadata exchanged by the two-agent handshake.
//
// Each reports NIXL's bandwidth (bytes over NIXL's telemetry transfer
// time), the average time per descriptor, prep / post / transfer average
// and p99 in µs, and, as the baseline in the same run, the host backend's
// bandwidth moving the same descriptors in this process and the ratio.
//
//	make bench-nixl

const (
	benchMaxBytes  = 64 << 20
	benchMaxBlocks = 1024
	benchHelperEnv = "KVSCOPE_NIXL_BENCH_P" // page size: run as the P helper
)

func TestMain(m *testing.M) {
	if page := os.Getenv(benchHelperEnv); page != "" {
		os.Exit(benchHelper(page))
	}
	os.Exit(m.Run())
}

// benchRegs is P's and D's single-region registrations for a page size:
// P holds twice D's blocks, so that no two descriptors of a request are
// contiguous on P.
func benchRegs(page int64) (p, d *xfer.Registration) {
	n := min(benchMaxBlocks, int64(benchMaxBytes)/page)
	reg := func(side xfer.Side, blocks int64) *xfer.Registration {
		return &xfer.Registration{Side: side, Rank: 0, TP: 1, NumBlocks: blocks,
			Regions: []xfer.Region{{Index: 0, BlockLen: page, NumBlocks: blocks}}}
	}
	return reg(xfer.P, 2*n), reg(xfer.D, n)
}

// benchTransfer is a request of batch descriptors of one page: D's blocks
// and P's even blocks, each in a shuffled order.
func benchTransfer(p, d *xfer.Registration, batch int) *xfer.Transfer {
	page := d.Regions[0].BlockLen
	rng := rand.New(rand.NewPCG(uint64(page), uint64(batch)))
	src, dst := rng.Perm(int(d.NumBlocks)), rng.Perm(int(d.NumBlocks))
	pairs := make([]xfer.Pair, batch)
	for i := range pairs {
		pairs[i] = xfer.Pair{Src: xfer.Loc{Offset: int64(2*src[i]) * page}, Dst: xfer.Loc{Offset: int64(dst[i]) * page}, Len: page, Layer: "l"}
	}
	x := &xfer.Transfer{Mode: xfer.Pull, PRegs: []*xfer.Registration{p}, DRegs: []*xfer.Registration{d},
		RankPairs: []xfer.RankPair{{P: 0, D: 0, Pairs: pairs}}, Bytes: int64(batch) * page, Descs: batch}
	x.Merged = xfer.MergedCount(pairs)
	return x
}

// benchHelper is the P process: it registers P's region for a page size
// with a P-only NIXL agent, prints its control address and serves the
// handshake until stdin closes.
func benchHelper(pageArg string) int {
	page, err := strconv.ParseInt(pageArg, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench helper:", err)
		return 2
	}
	b, err := NewNIXLSide("kvscope-bench", xfer.P, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench helper:", err)
		return 1
	}
	defer b.Close()
	p, _ := benchRegs(page)
	if err := b.Register([]*xfer.Registration{p}); err != nil {
		fmt.Fprintln(os.Stderr, "bench helper:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench helper:", err)
		return 1
	}
	fmt.Println(ln.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		os.Stdin.Read(make([]byte, 1)) // the benchmark closes stdin when done
		cancel()
	}()
	srv := &PeerServer{Mem: b, NIXL: b, Prefill: func(PrefillRequest) error { return nil }}
	srv.Serve(ctx, ln)
	return 0
}

// benchP starts the P helper for a page size with UCX_TLS=tls and returns
// its control address.
func benchP(b *testing.B, page int64, tls string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchHelperEnv+"="+strconv.FormatInt(page, 10), "UCX_TLS="+tls, "UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line := make([]byte, 64)
	n, err := out.Read(line)
	if err != nil {
		b.Fatalf("bench helper: %v", err)
	}
	return strings.TrimSpace(string(line[:n]))
}

// benchStats gathers per-request figures.
type benchStats struct {
	prep, post, xfer []float64
	bytes            int64
	xferSum          float64
}

func (s *benchStats) add(st *Stats) {
	s.prep, s.post, s.xfer = append(s.prep, st.PrepUS), append(s.post, st.PostUS), append(s.xfer, st.TransferUS)
	s.bytes += st.Bytes
	s.xferSum += st.TransferUS
}

func (s *benchStats) gbps() float64 {
	if s.xferSum == 0 {
		return 0
	}
	return float64(s.bytes) / 1e3 / s.xferSum
}

func avg(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(max(len(v), 1))
}

func p99(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// benchMove prepares, posts and waits for one request.
func benchMove(b *testing.B, be Backend, x *xfer.Transfer) *Stats {
	p, err := be.Prepare(x)
	if err != nil {
		b.Fatal(err)
	}
	h, err := be.Post(p, "bench:done")
	if err != nil {
		b.Fatal(err)
	}
	st, err := WaitFor(be, h, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	be.Notifications()
	return st
}

// BenchmarkNIXL is the table; see the comment at the top of this file.
func BenchmarkNIXL(b *testing.B) {
	pages := []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}
	batches := []int{1, 4, 16, 64, 256, 1024}
	modes := []struct {
		name, tls string
		two       bool
	}{
		{"one-process", os.Getenv("UCX_TLS"), false},
		{"two-process-tcp", "tcp,self", true},
		{"two-process-tcp-shm", "tcp,shm,self", true},
	}
	for _, mode := range modes {
		for _, page := range pages {
			pr, dr := benchRegs(page)
			host := NewHost(1<<32, nil)
			if err := host.Register([]*xfer.Registration{pr, dr}); err != nil {
				b.Fatal(err)
			}
			var be Backend
			var err error
			if mode.two {
				old, had := os.LookupEnv("UCX_TLS")
				os.Setenv("UCX_TLS", mode.tls) // UCX reads it when D's agent is created
				be, err = NewNIXLRemote("kvscope-bench", benchP(b, page, mode.tls), "", nil)
				if had {
					os.Setenv("UCX_TLS", old)
				} else {
					os.Unsetenv("UCX_TLS")
				}
			} else {
				be, err = NewNIXL("kvscope-bench", nil)
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := be.Register([]*xfer.Registration{pr, dr}); err != nil {
				b.Fatal(err)
			}
			if !mode.two {
				md, err := be.Metadata()
				if err == nil {
					err = be.LoadRemote(md)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for _, batch := range batches {
				if int64(batch) > dr.NumBlocks {
					continue
				}
				x := benchTransfer(pr, dr, batch)
				b.Run(fmt.Sprintf("%s/page=%dKiB/batch=%d", mode.name, page>>10, batch), func(b *testing.B) {
					benchMove(b, be, x) // prepares the lists once, as a handshake would
					var nx benchStats
					b.SetBytes(x.Bytes)
					for b.Loop() {
						nx.add(benchMove(b, be, x))
					}
					b.StopTimer()
					var hs benchStats
					for range min(len(nx.xfer), 200) {
						hs.add(benchMove(b, host, x))
					}
					b.ReportMetric(nx.gbps(), "GB/s")
					b.ReportMetric(avg(nx.xfer)/float64(batch), "us/desc")
					b.ReportMetric(avg(nx.prep), "prep-us")
					b.ReportMetric(p99(nx.prep), "prep-p99-us")
					b.ReportMetric(avg(nx.post), "post-us")
					b.ReportMetric(p99(nx.post), "post-p99-us")
					b.ReportMetric(avg(nx.xfer), "xfer-us")
					b.ReportMetric(p99(nx.xfer), "xfer-p99-us")
					b.ReportMetric(hs.gbps(), "host-GB/s")
					if h := hs.gbps(); h > 0 {
						b.ReportMetric(nx.gbps()/h, "x-host")
					}
				})
			}
			be.Close()
			host.Close()
		}
	}
}

// BenchmarkNIXLPrepare is the per-request preparation of 1,024 descriptors
// of 4 KiB (validation, grouping, makeXferReq from prepared lists, and the
// request's release), against the host backend preparing the same
// descriptors (validation and grouping only) in the same run.
func BenchmarkNIXLPrepare(b *testing.B) {
	pr, dr := benchRegs(4 << 10)
	x := benchTransfer(pr, dr, 1024)
	n, err := newNIXL("kvscope-prep", nil, xfer.P, xfer.D)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if err := n.Register([]*xfer.Registration{pr, dr}); err != nil {
		b.Fatal(err)
	}
	md, err := n.Metadata()
	if err == nil {
		err = n.LoadRemote(md)
	}
	if err != nil {
		b.Fatal(err)
	}
	host := NewHost(1<<32, nil)
	defer host.Close()
	if err := host.Register([]*xfer.Registration{pr, dr}); err != nil {
		b.Fatal(err)
	}
	b.Run("nixl", func(b *testing.B) {
		for b.Loop() {
			p, err := n.Prepare(x)
			if err != nil {
				b.Fatal(err)
			}
			n.mu.Lock()
			nixlRelease(n.prepared[p])
			delete(n.prepared, p)
			n.mu.Unlock()
		}
	})
	b.Run("host", func(b *testing.B) {
		for b.Loop() {
			if _, err := host.Prepare(x); err != nil {
				b.Fatal(err)
			}
		}
	})
}
