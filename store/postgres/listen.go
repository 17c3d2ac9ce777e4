package postgres

import (
	"context"
	"fmt"
	"time"

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
func (s *Store) Listen(ctx context.Context) (<-chan string, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: listen: %w", err)
	}
	conn := pc.Hijack() // a listening connection must not go back to the pool
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("postgres: listen: %w", err)
	}
	out := make(chan string, listenBuffer)
	go func() {
		defer close(out)
		defer closeConn(conn)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			select {
			case out <- n.Payload:
			default:
			}
		}
	}()
	return out, nil
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// Subscribe implements store.Notifier over LISTEN/NOTIFY: the channel
// receives a wake-up when any process commits messages into the outbox, or
// an operator makes messages due again (RetryNow, ReleaseStream, a replay),
// coalesced. When the listening connection fails, Subscribe sends one
// wake-up (notifications may have been missed) and listens again, backing
// off while the database is unreachable. The channel is closed when ctx is
// done.
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	names, err := s.Listen(ctx)
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
				if names, err = s.Listen(ctx); err == nil {
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
