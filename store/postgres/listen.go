package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
