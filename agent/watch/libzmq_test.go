package watch_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
)

// libzmqListener is vLLM's handshake listener in miniature
// (nixl/scheduler.py): a pyzmq ROUTER that reads (identity, b"", msg),
// decodes the request and sends (identity, b"", answer).
const libzmqListener = `
import sys, zmq, msgpack
sock = zmq.Context().socket(zmq.ROUTER)
port = sock.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
answer = bytes.fromhex(sys.argv[1])
while True:
    identity, _, msg = sock.recv_multipart()
    tag, rank = msgpack.loads(msg)
    assert tag == b"get_meta_msg" and rank == 0, (tag, rank)
    sock.send_multipart((identity, b"", answer))
`

// TestQueryRankLibzmq: the watcher's ZMTP client against libzmq's ROUTER,
// as vLLM binds it through pyzmq. Skipped where no python3 has pyzmq and
// msgpack (Debian: python3-zmq, python3-msgpack).
func TestQueryRankLibzmq(t *testing.T) {
	var python string
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip("no python3 with pyzmq and msgpack: libzmq's side of the side channel is not tested here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", libzmqListener, hex.EncodeToString(handshakeAnswer(t, "agent-libzmq", 0, nil)))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strings.TrimSpace(port)
	for i := range 3 { // three connections, one after another
		md, err := watch.QueryRank(ctx, addr, 0, 5*time.Second, 0)
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if md.Agent != "agent-libzmq" || md.BlockSize != 16 || md.NumBlocks != 8192 {
			t.Errorf("query %d: %+v", i, md)
		}
	}
}
