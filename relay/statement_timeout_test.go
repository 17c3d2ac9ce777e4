package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/transport"
)

// A role, database or connection URL whose statement_timeout is shorter
// than a claim of the relay's usual size (or than recording a thousand
// outcomes) made every such call fail, and the relay, making the same
// call again after each back-off, never delivered (or recorded) again:
// measured with statement_timeout=40ms and 50,000 messages waiting, a
// relay with BatchSize 2,000 delivered 63 messages and then none in 40 s.
// It now halves a call the database cancelled, at once, and says so once
// at WARN.
//
// The database is made slow per row, so that the size of a call decides
// whether it fits the timeout whatever the machine's load: a trigger
// sleeps 5 ms for each outbox row the store updates (a claim, a renewal)
// or deletes (recording a delivery), under a statement_timeout of 500 ms,
// set in the URL's options as an operator would.

// slowStore is a PostgreSQL store, in a schema of its own, on a connection
// URL with statement_timeout set, and holding msgs messages for "d"; and
// the outbox table's qualified name.
func slowStore(t *testing.T, msgs int, slowOn string) (store.Store, *callLog, string) {
	t.Helper()
	ctx := context.Background()
	schema := testenv.NewSchema(t, "t_")
	u := testenv.PostgresURL()
	if strings.Contains(u, "?") {
		u += "&"
	} else {
		u += "?"
	}
	u += "options=-c%20statement_timeout%3D500"
	s, err := postgres.Open(ctx, u, store.Config{}, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	batch := make([]*outbox.Message, 0, 100)
	for i := range msgs {
		batch = append(batch, &outbox.Message{Destination: "d", Type: "t", Payload: []byte(fmt.Sprint(i))})
		if len(batch) == cap(batch) || i == msgs-1 {
			if err := s.Enqueue(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	table := s.OutboxTable() // qualified
	for _, q := range []string{
		`CREATE FUNCTION ` + schema + `.slow() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.005); IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER slow BEFORE ` + slowOn + ` ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION ` + schema + `.slow()`,
	} {
		if _, err := testenv.PostgresAdmin(t).Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cl := &callLog{}
	return &loggedStore{Store: s, log: cl}, cl, table
}

// loggedStore notes the size and error of each call that claims or
// records.
type loggedStore struct {
	*postgres.Store
	log *callLog
}

type callLog struct {
	mu    sync.Mutex
	calls []loggedCall
}

type loggedCall struct {
	claim, renew, record int
	err                  error
}

func (s *loggedStore) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	res, err := s.Store.ProcessBatch(ctx, b)
	c := loggedCall{claim: b.Claim.Limit, renew: len(b.RenewLeases), record: len(b.Completions), err: err}
	if c.claim+c.renew+c.record > 0 {
		s.log.mu.Lock()
		s.log.calls = append(s.log.calls, c)
		s.log.mu.Unlock()
	}
	return res, err
}

// shrunk checks that a call of size timed out and a smaller one succeeded
// after it, and returns the sizes of the first that timed out and of the
// largest that succeeded after it.
func (cl *callLog) shrunk(t *testing.T, size func(loggedCall) int) (failed, after int) {
	t.Helper()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, c := range cl.calls {
		switch {
		case size(c) == 0:
		case c.err != nil && failed == 0:
			if !errors.Is(c.err, store.ErrTimedOut) || !errors.Is(c.err, store.ErrUnavailable) {
				t.Fatalf("a call of %d failed with %v; want a statement timeout matching store.ErrTimedOut and store.ErrUnavailable", size(c), c.err)
			}
			failed = size(c)
		case c.err == nil && failed > 0:
			after = max(after, size(c))
		}
	}
	if failed == 0 || after == 0 || after >= failed {
		t.Fatalf("want a call that timed out and smaller ones that succeeded after it; timed out %d, largest after %d", failed, after)
	}
	return failed, after
}

// deliverAll runs a relay with cfg on s until n messages were delivered,
// and checks none was delivered twice.
func deliverAll(t *testing.T, s store.Store, n int, cfg Config) *logSink {
	t.Helper()
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	all := make(chan struct{})
	cfg.Destinations = map[string]Destination{"d": {Transport: transport.Func(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID]++
		if len(seen) == n && seen[m.ID] == 1 {
			close(all)
		}
		return nil
	})}}
	logs := &logSink{}
	cfg.Logger = slog.New(logs)
	r, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(90 * time.Second): // a safety net only
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		cancel()
		<-done
		t.Fatalf("delivered %d of %d messages in 90 s", got, n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, k := range seen {
		if k > 1 {
			t.Errorf("message %s delivered %d times", id, k)
		}
	}
	return logs
}

// timeoutWarnings are the WARN records naming statement_timeout.
func timeoutWarnings(logs *logSink) int {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	n := 0
	for _, r := range logs.recs {
		if r.level == slog.LevelWarn && strings.Contains(r.msg, "statement_timeout") {
			n++
		}
	}
	return n
}

func TestClaimShrinksUnderStatementTimeout(t *testing.T) {
	const n = 400
	s, calls, _ := slowStore(t, n, "UPDATE")
	// BatchSize alone is held fixed: every claim asks for 1,000 (5 s of
	// updates) less what the relay holds.
	logs := deliverAll(t, s, n, Config{BatchSize: 1000})
	failed, after := calls.shrunk(t, func(c loggedCall) int { return c.claim + c.renew })
	t.Logf("a claim of %d rows timed out; the largest that succeeded after it: %d", failed, after)
	if w := timeoutWarnings(logs); w != 1 {
		t.Errorf("%d WARN records name statement_timeout, want 1", w)
	}
}

func TestRecordingShrinksUnderStatementTimeout(t *testing.T) {
	const n = 300
	s, calls, table := slowStore(t, n, "DELETE")
	logs := deliverAll(t, s, n, Config{BatchSize: 1000})
	// every delivery recorded (the last ones as the relay stopped)
	var left int
	if err := testenv.PostgresAdmin(t).QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d delivered messages still in the outbox: their deliveries were not recorded", left)
	}
	failed, after := calls.shrunk(t, func(c loggedCall) int { return c.record })
	t.Logf("recording %d outcomes timed out; the most recorded in a call after it: %d", failed, after)
	if w := timeoutWarnings(logs); w != 1 {
		t.Errorf("%d WARN records name statement_timeout, want 1", w)
	}
}
