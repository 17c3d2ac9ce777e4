package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// TestStoreOutOfReachIsA503: while the database cannot be reached (its
// connections refused) or is held by another writer past the store's
// wait, the API answers 503 "store unavailable" with a Retry-After, as a
// client should try again, not 500 "internal error". It answers again as
// usual once the database is back.
func TestStoreOutOfReachIsA503(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		base := openPostgres(t)
		cfg := base.Pool().Config().Copy()
		var down atomic.Bool
		dial := cfg.ConnConfig.DialFunc
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if down.Load() {
				return nil, errors.New("connection refused (the test took the database away)")
			}
			return dial(ctx, network, addr)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		st, err := postgres.New(pool, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		outOfReach(t, st, func(gone bool) {
			down.Store(gone)
			pool.Reset() // the connections open now go
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "b.db")
		// A lock wait of a second, not less: with 50 ms, the write made
		// once the lock was free again answered 503 once in a loaded
		// make test run (the package took 227 s).
		st, err := sqlite.Open(context.Background(), path, store.Config{}, sqlite.WithLockWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		other, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		var conn *sql.Conn
		outOfReach(t, st, func(gone bool) {
			ctx := context.Background()
			if gone {
				// another process holds the write lock
				if conn, err = other.Conn(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
					t.Fatal(err)
				}
				return
			}
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			conn.Close()
		})
	})
}

// outOfReach enqueues a message on st, takes the database away with
// setGone(true), checks the 503s, brings it back and checks the action
// then succeeds.
func outOfReach(t *testing.T, st store.Store, setGone func(bool)) {
	// No relay of its own: GET /v1/breakers reads the fleet's circuits.
	a := newAPI(t, st, func(c *admin.Config) { c.Breakers = nil })
	m := &outbox.Message{Destination: "billing", Stream: "s", Type: "order.created", Payload: []byte(`{}`)}
	if err := st.Enqueue(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) (*http.Response, admin.Problem) {
		t.Helper()
		resp, _, p := a.send(method, path, "{}")
		return resp, p
	}
	action := "/v1/messages/" + m.ID.String() + "/retry-now"

	setGone(true)
	calls := [][2]string{{"POST", action}}
	if _, pg := st.(*postgres.Store); pg {
		// SQLite reads on while another connection writes
		calls = append(calls, [2]string{"GET", "/v1/messages/" + m.ID.String()}, [2]string{"GET", "/v1/dlq"},
			[2]string{"GET", "/v1/breakers"})
	}
	for _, c := range calls {
		resp, p := do(c[0], c[1])
		if resp.StatusCode != http.StatusServiceUnavailable || p.Title != "store unavailable" {
			t.Errorf("%s %s with the database out of reach: %d %+v, want 503 store unavailable", c[0], c[1], resp.StatusCode, p)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "5" {
			t.Errorf("%s %s: Retry-After %q, want 5", c[0], c[1], ra)
		}
	}
	if !strings.Contains(a.logs.String(), "the store is out of reach") {
		t.Errorf("log = %s, want the outage said", a.logs.String())
	}

	setGone(false)
	if resp, p := do("POST", action); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s with the database back: %d %+v", action, resp.StatusCode, p)
	}
}
