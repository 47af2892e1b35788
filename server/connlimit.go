package main

import (
	"net"
	"sync"
)

// DefaultMaxConnsPerClient is --max-conns-per-client's default: room for
// a browser's six connections and its websockets, a script's pool and
// the soak's 200 live subscribers from one address, far under the file
// descriptors the server may open.
const DefaultMaxConnsPerClient = 512

// MaxConnsPerClientLimit bounds --max-conns-per-client.
const MaxConnsPerClientLimit = 1 << 16

// connLimiter is a listener that holds each client (a remote IP address)
// to at most max open connections: a connection past it is closed as it
// is accepted, before the HTTP server reads a byte, and counted (refused,
// when set). One client flooding the server with connections then cannot
// take every file descriptor, and /api/plan still answers the others.
type connLimiter struct {
	net.Listener
	max     int
	refused func(ip string) // counts a refused connection (nil: not counted)

	mu   sync.Mutex
	open map[string]int // open connections per remote IP
}

// limitConns wraps ln; max <= 0 leaves it unlimited.
func limitConns(ln net.Listener, max int, refused func(ip string)) net.Listener {
	if max <= 0 {
		return ln
	}
	return &connLimiter{Listener: ln, max: max, refused: refused, open: map[string]int{}}
}

// Accept returns the next connection whose client is under its limit,
// closing those over it.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		ok := l.open[ip] < l.max
		if ok {
			l.open[ip]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, release: func() { l.release(ip) }}, nil
		}
		// Counted before it is closed: a client that sees the close
		// then finds the refusal already counted.
		if l.refused != nil {
			l.refused(ip)
		}
		c.Close()
	}
}

func (l *connLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// openConns is how many connections ip holds now.
func (l *connLimiter) openConns(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

// remoteIP is a connection's client address without its port.
func remoteIP(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// limitedConn gives its client's place back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// CloseWrite half-closes a TCP connection, as the HTTP server does
// before it closes one whose request it refused.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
