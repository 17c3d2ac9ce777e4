package postgres

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// blackholeProxy forwards a local port to target. cutOff makes every
// connection open at that moment a black hole for good: bytes in either
// direction are swallowed and the connection stays open, as when a
// partition outlasts a firewall's or NAT's state for it. Connections made
// afterwards are forwarded: the partition has healed.
type blackholeProxy struct {
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]*bool // each connection's dead flag, shared by both halves
	closed bool
	// refuse closes new connections at once, counting them in refused:
	// the database is still out of reach.
	refuse  bool
	refused int
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackholeProxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]*bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *blackholeProxy) pipe(c net.Conn) {
	p.mu.Lock()
	if p.refuse {
		p.refused++
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	dead := new(bool)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = dead, dead
	p.mu.Unlock()
	go p.copy(u, c, dead)
	p.copy(c, u, dead)
}

// copy copies src to dst until either fails, dropping what it reads once
// the connection is cut off.
func (p *blackholeProxy) copy(dst, src net.Conn, dead *bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		cut := *dead
		p.mu.Unlock()
		if n > 0 && !cut {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
}

// cutOff makes every open connection a black hole.
func (p *blackholeProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, dead := range p.conns {
		*dead = true
	}
}

// refuseNew sets whether new connections are closed at once.
func (p *blackholeProxy) refuseNew(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// refusedCount is how many connections were closed at once.
func (p *blackholeProxy) refusedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *blackholeProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}

// openBehindProxy opens (Open) a migrated store in a fresh schema whose
// connections go through a blackholeProxy.
// direct is a second store on the same schema whose connections do not.
func openBehindProxy(t *testing.T, cfg store.Config) (proxied, direct *Store, px *blackholeProxy) {
	t.Helper()
	schema := newSchema(t)
	u, err := url.Parse(testURL())
	if err != nil {
		t.Fatal(err)
	}
	px = newBlackholeProxy(t, u.Host)
	u.Host = px.addr
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("pool_max_conns", "3")
	u.RawQuery = q.Encode()
	proxied, err = Open(context.Background(), u.String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxied.Close() })
	t.Cleanup(px.close) // first: closing the pool's dead connections waits
	if err := proxied.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	direct, err = New(schemaPool(t, schema, 2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return proxied, direct, px
}

// TestSubscribeWakesAfterAPartitionHeals: the listening connection was
// lost to a partition without a word (no reset, no close), and the
// partition healed. Subscribe waited on it for ever: no wake-up came again,
// and a relay waiting for one slept its whole poll interval after every
// insert. The listener now checks its connection while no notification
// comes, and on a dead one listens again on a new connection and wakes
// the subscriber (it may have missed notifications).
func TestSubscribeWakesAfterAPartitionHeals(t *testing.T) {
	s, direct, px := openBehindProxy(t, store.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wake, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetWaiting(ctx, "relay-1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "partition", Type: "before"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up after a committed enqueue")
	}

	px.cutOff()
	// Other tests' inserts notify the same channel: whatever the dead
	// connection had delivered is drained; none comes through it now.
	for drained := false; !drained; {
		select {
		case <-wake:
		default:
			drained = true
		}
	}
	start := time.Now()
	if err := direct.Enqueue(ctx, &outbox.Message{Destination: "partition", Type: "after"}); err != nil {
		t.Fatal(err)
	}
	const limit = 15 * time.Second
	select {
	case <-wake:
		t.Logf("woken %v after the partition", time.Since(start))
	case <-time.After(limit):
		t.Fatalf("no wake-up within %v of an enqueue after the listening connection was lost to a partition", limit)
	}
}

// TestIdleConnectionsLostToAPartitionAreReplaced: a partition silently
// killed the pool's idle connections, and healed. pgxpool pings a
// connection idle for over a second before handing it out, but with no
// limit of its own: each call waited out its whole context (the relay's
// 30 s) on a dead connection, one call per dead connection. The ping now
// gives up after pingTimeout and the pool dials afresh.
func TestIdleConnectionsLostToAPartitionAreReplaced(t *testing.T) {
	s, _, px := openBehindProxy(t, store.Config{})
	ctx := context.Background()
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "partition", Type: "before"}); err != nil {
		t.Fatal(err)
	}
	// pgxpool pings only a connection idle for over a second: this waits
	// for that, not for something to happen.
	<-time.After(1200 * time.Millisecond)
	px.cutOff()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	err := s.Enqueue(cctx, &outbox.Message{Destination: "partition", Type: "after"})
	const limit = 3 * pingTimeout
	if took := time.Since(start); err != nil || took > limit {
		t.Fatalf("enqueue after the partition: %v after %v, want success within %v", err, took, limit)
	}
}

// TestSubscribeWakesWhenItListensAgain: the listening connection failed
// and the database stayed out of reach for a while. Subscribe woke the
// subscriber when the connection failed, while the database was still
// away, and not when it listened again: a relay whose store calls had
// failed meanwhile slept out its back-off (up to MaxPollInterval) after
// the database came back, with whatever was written meanwhile waiting. It
// now wakes the subscriber once more when it listens again.
func TestSubscribeWakesWhenItListensAgain(t *testing.T) {
	s, _, px := openBehindProxy(t, store.Config{TablePrefix: "relisten_"}) // a channel no other test notifies
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	wake, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	px.refuseNew(true)
	px.cutOff()
	select {
	case <-wake: // the listening connection is found dead
	case <-ctx.Done():
		t.Fatal("no wake-up after the listening connection was lost")
	}
	deadline := time.Now().Add(15 * time.Second)
	for px.refusedCount() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("Subscribe did not try to listen again")
		}
		<-time.After(10 * time.Millisecond)
	}
	px.refuseNew(false)
	const limit = 10 * time.Second // the listener's back-off is at most 5 s
	select {
	case <-wake:
	case <-time.After(limit):
		t.Fatalf("no wake-up within %v of the database coming back", limit)
	}
}
