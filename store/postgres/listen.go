package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/retry"
)

// listenBuffer is how many notifications Listen holds for a slow reader;
// more are dropped (they are wake-up hints, and the reader claims what is
// due whenever it wakes).
const listenBuffer = 256

// Listen takes a connection out of the pool, LISTENs on Channel and
// returns the destinations that inserts into the outbox name, one per
// statement and destination. It is a wake-up hint for a relay that also
// polls: when the reader falls behind, notifications are dropped. The
// channel is closed when ctx is done or the connection fails; the caller
// may Listen again.
//
// Inserts notify only while someone waits (store.WakeGate): Listen
// registers as waiting for as long as it listens. The registration names
// the server process of the listening connection (listenerID), so that
// the reaper (deadInstancesSQL) drops it once that connection is gone: a
// caller whose process died never ended it, and every insert notified
// for good.
func (s *Store) Listen(ctx context.Context) (<-chan string, error) {
	lctx, stop := context.WithCancel(ctx)
	names, pid, err := s.listenConn(lctx)
	if err != nil {
		stop()
		return nil, err
	}
	id := listenerID(pid)
	if err := s.SetWaiting(ctx, id, true); err != nil {
		stop()
		for range names {
		}
		return nil, err
	}
	out := make(chan string, listenBuffer)
	go func() {
		defer close(out)
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.SetWaiting(rctx, id, false)
			cancel()
		}()
		defer stop()
		for n := range names {
			select {
			case out <- n:
			default:
			}
		}
	}()
	return out, nil
}

// listenerID is the waiters registration of a Listen whose connection's
// server process is pid: "listen:<pid>:<uuid>" (listenerIDPattern).
func listenerID(pid uint32) string {
	return fmt.Sprintf("listen:%d:%s", pid, uuid.NewString())
}

// SetWaiting registers id as waiting for wake-ups, or ends its
// registration (store.WakeGate): inserts send their NOTIFY only while
// someone is registered (migration 0010).
func (s *Store) SetWaiting(ctx context.Context, id string, waiting bool) error {
	var err error
	if waiting {
		_, err = s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`waiters (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`, id)
	} else {
		_, err = s.pool.Exec(ctx, `DELETE FROM `+s.n.qual+`waiters WHERE id = $1`, id)
	}
	if err != nil {
		return fmt.Errorf("postgres: set waiting: %w", err)
	}
	return nil
}

// listen is Listen without the registration: Subscribe's relay registers
// itself only while it waits.
func (s *Store) listen(ctx context.Context) (<-chan string, error) {
	names, _, err := s.listenConn(ctx)
	return names, err
}

// listenConn is listen, also returning the server process id of the
// listening connection.
func (s *Store) listenConn(ctx context.Context) (<-chan string, uint32, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: listen: %w", err)
	}
	conn := pc.Hijack() // a listening connection must not go back to the pool
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, 0, fmt.Errorf("postgres: listen: %w", err)
	}
	// the server's own id of the process (a pooler's BackendKeyData may
	// carry another)
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		closeConn(conn)
		return nil, 0, fmt.Errorf("postgres: listen: %w", err)
	}
	out := make(chan string, listenBuffer)
	go func() {
		// The subscriber hears of the end first: closing a dead connection
		// waits closeConn's 5 s.
		defer closeConn(conn)
		defer close(out)
		for {
			wctx, cancel := context.WithTimeout(ctx, listenCheck)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil || wctx.Err() == nil || !alive(ctx, conn) {
					return
				}
				continue
			}
			select {
			case out <- n.Payload:
			default:
			}
		}
	}()
	return out, pid, nil
}

// listenCheck is how long a listening connection waits for a notification
// before it makes sure the database is still there (alive): one lost to a
// partition without a reset or a close, or whose database vanished, would
// otherwise be waited on for ever, and the subscriber never woken again.
const listenCheck = 5 * time.Second

// listenPingTimeout bounds alive's ping. A live database answers one in
// milliseconds; one that misses it costs a new listening connection and a
// wake-up, no more.
const listenPingTimeout = 2 * time.Second

// alive pings a listening connection and reports whether it answered
// within listenPingTimeout.
func alive(ctx context.Context, c *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	defer cancel()
	return c.Ping(ctx) == nil
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// Subscribe implements store.Notifier over LISTEN/NOTIFY: the channel
// receives a wake-up when any process commits messages into the outbox
// while someone is registered as waiting (SetWaiting: a relay registers
// just before it waits), or an operator makes messages due again
// (RetryNow, ReleaseStream, a replay), coalesced. When the listening connection fails, Subscribe sends one
// wake-up (notifications may have been missed) and listens again, backing
// off while the database is unreachable, and sends another once it
// listens again. The channel is closed when ctx is done.
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	names, err := s.listen(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		backoff := retry.NewExponentialBackoff(100*time.Millisecond, 5*time.Second, true)
		for {
			for range names {
				wake()
			}
			if ctx.Err() != nil {
				return
			}
			wake()
			for n := 1; ; n++ {
				if !clock.Sleep(clock.Real, backoff.Delay(n), ctx.Done()) {
					return
				}
				if names, err = s.listen(ctx); err == nil {
					// The database is back: a relay whose calls failed
					// meanwhile claims now rather than after its
					// back-off, and finds what was written meanwhile.
					wake()
					break
				}
			}
		}
	}()
	return out, nil
}

// wakeRelays notifies every listening relay that messages may have become
// claimable. It is best effort: relays also poll.
func (s *Store) wakeRelays(ctx context.Context) {
	_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, '')", s.Channel())
}
