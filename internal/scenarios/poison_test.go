package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// jobs is the scenario's second destination: a Go handler.
const jobs = "jobs"

// poisonRow is a bad message written with plain SQL, and what its dead
// letter must say.
type poisonRow struct {
	name   string
	id     uuid.UUID
	reason errorhandling.FailureReason
	says   []string // texts the dead letter's error must hold
}

// TestPoisonNeverStopsTheRest is issue 8's poison suite. While a webhook
// and a Go handler keep receiving good messages, bad ones arrive: rows
// written with plain SQL whose stream or type hold control characters or
// whose payload is over the limit (which HTTP cannot or must not carry),
// rows the store cannot decode at all (written before the schema's checks
// existed), and a message whose handler fails with an error text holding
// NUL and invalid UTF-8. Every good message is delivered without the
// clock moving (no retry, no wait), every bad one is in the dead-letter
// queue with a reason and an error naming its cause, nothing is lost, and
// neither destination's breaker opens: the destinations were never at
// fault.
func TestPoisonNeverStopsTheRest(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		h := e.newHook()
		var (
			mu      sync.Mutex
			handled []string
		)
		handler := transport.Func(func(_ context.Context, m *outbox.Message) error {
			if string(m.Payload) == "poison" {
				return errorhandling.WithReason(errorhandling.Permanent(errors.New("handler: bad\x00byte \xff\xfe in row 7")),
					errorhandling.ReasonHandlerException)
			}
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, string(m.Payload))
			return nil
		})

		goodHook := interleave(stream("orders", 6), stream("refunds", 6))
		goodJobs := []*outbox.Message{
			{Destination: jobs, Type: "job", Payload: []byte("job-0")},
			{Destination: jobs, Type: "job", Payload: []byte("job-1")},
		}
		e.enqueue(goodHook[:6]...)
		e.enqueue(goodJobs[0])

		bad := e.writePoison(b)
		poisonJob := &outbox.Message{Destination: jobs, Stream: "jobs-7", Type: "job", Payload: []byte("poison")}
		e.enqueue(poisonJob)
		bad = append(bad, poisonRow{name: "handler error with NUL and invalid UTF-8", id: poisonJob.ID,
			reason: errorhandling.ReasonHandlerException, says: []string{"handler: badbyte \uFFFD in row 7"}})

		rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{
			dest: {Transport: h.transport("relay-1", false)},
			jobs: {Transport: handler},
		}})
		e.enqueue(goodHook[6:]...) // the destination keeps receiving meanwhile
		e.enqueue(goodJobs[1])
		good := append(append([]*outbox.Message(nil), goodHook...), goodJobs...)
		e.waitFor("the good messages and the dead letters", func() bool {
			return e.gone(good...) && len(e.deadLetters()) == len(bad)
		})
		e.settle()

		if !e.clk.Now().Equal(epoch) {
			t.Fatalf("the clock moved to %s: something waited for a retry", e.clk.Now())
		}
		for _, m := range goodHook {
			if n := h.count(string(m.Payload)); n != 1 {
				t.Errorf("%s was delivered %d times, want once", m.Payload, n)
			}
		}
		mu.Lock()
		if strings.Join(handled, ",") != "job-0,job-1" {
			t.Errorf("the handler got %v, want job-0 and job-1", handled)
		}
		mu.Unlock()

		byID := map[string]*dlq.Entry{}
		for _, en := range e.deadLetters() {
			byID[en.MessageID] = en
		}
		for _, p := range bad {
			en := byID[p.id.String()]
			if en == nil {
				t.Errorf("%s: not in the dead-letter queue (lost?)", p.name)
				continue
			}
			if en.Reason != p.reason {
				t.Errorf("%s: reason %s, want %s (error %q)", p.name, en.Reason, p.reason, en.ErrorMessage)
			}
			if !utf8.ValidString(en.ErrorMessage) || strings.IndexByte(en.ErrorMessage, 0) >= 0 {
				t.Errorf("%s: the error %q is not clean text", p.name, en.ErrorMessage)
			}
			for _, s := range p.says {
				if !strings.Contains(en.ErrorMessage, s) {
					t.Errorf("%s: the error %q does not say %q", p.name, en.ErrorMessage, s)
				}
			}
			if n := h.countID(p.id); n != 0 {
				t.Errorf("%s: sent %d times", p.name, n)
			}
		}
		for _, d := range []string{dest, jobs} {
			if st := rn.r.Breaker(d).State(); st != circuitbreaker.StateClosed {
				t.Errorf("the breaker of %s is %s: the destination was never at fault", d, st)
			}
		}
		if s := rn.r.Stats(); s.Delivered != int64(len(good)) || s.Retries != 0 {
			t.Errorf("stats = %+v, want %d delivered, no retries", s, len(good))
		}
	})
}

// writePoison writes, with plain SQL, the bad rows the store and the
// webhook must park: some the schema lets through (control characters,
// a payload over the limit) and some it would refuse today but an old
// database may hold (its checks are dropped to write them).
func (e *env) writePoison(b backend) []poisonRow {
	e.t.Helper()
	row := func(name string, reason errorhandling.FailureReason, says ...string) poisonRow {
		return poisonRow{name: name, id: uuid.Must(uuid.NewV7()), reason: reason, says: says}
	}
	ctrlStream := row("a line break in the stream", errorhandling.ReasonValidationFailure, "stream", "U+000A")
	ctrlType := row("a tab in the type", errorhandling.ReasonValidationFailure, "type", "U+0009")
	big := row("a payload over the limit", errorhandling.ReasonValidationFailure,
		fmt.Sprintf("payload is %d bytes, over the limit of %d", outbox.DefaultMaxPayloadBytes+1, outbox.DefaultMaxPayloadBytes))
	payload := strings.Repeat("x", outbox.DefaultMaxPayloadBytes+1)
	rows := []poisonRow{ctrlStream, ctrlType, big}
	switch b {
	case onSQLite:
		db := e.s.(*sqlite.Store).DB()
		exec := func(q string, args ...any) {
			e.t.Helper()
			if _, err := db.ExecContext(e.ctx, q, args...); err != nil {
				e.t.Fatalf("%s: %v", q, err)
			}
		}
		ins := `INSERT INTO backstop_outbox (id, destination, stream, type, payload) VALUES (?, ?, ?, ?, ?)`
		exec(ins, ctrlStream.id.String(), dest, "orders\nadmin", "order.created", "{}")
		exec(ins, ctrlType.id.String(), dest, "plain-1", "order\tcreated", "{}")
		exec(ins, big.id.String(), dest, "plain-2", "order.created", payload)
		dropSQLiteChecks(e.t, e.s.(*sqlite.Store))
		attempts := row("attempts 'x'", errorhandling.ReasonSerializationError, `column attempts: "x" is not an integer`)
		status := row("status 'abc'", errorhandling.ReasonSerializationError, `column status: "abc" is not an integer`)
		sched := row("a text scheduled_for", errorhandling.ReasonSerializationError, `column scheduled_for: "tomorrow"`)
		exec(`INSERT INTO backstop_outbox (id, destination, stream, type, attempts) VALUES (?, ?, 'plain-3', 't', 'x')`, attempts.id.String(), dest)
		exec(`INSERT INTO backstop_outbox (id, destination, stream, type, status) VALUES (?, ?, 'plain-4', 't', 'abc')`, status.id.String(), jobs)
		exec(`INSERT INTO backstop_outbox (id, destination, stream, type, scheduled_for) VALUES (?, ?, 'plain-5', 't', 'tomorrow')`, sched.id.String(), dest)
		rows = append(rows, attempts, status, sched)
	case onPostgres:
		s := e.s.(*postgres.Store)
		exec := func(q string, args ...any) {
			e.t.Helper()
			if _, err := s.Pool().Exec(e.ctx, strings.ReplaceAll(q, "{outbox}", s.OutboxTable()), args...); err != nil {
				e.t.Fatalf("%s: %v", q, err)
			}
		}
		ins := `INSERT INTO {outbox} (id, destination, stream, type, payload) VALUES ($1, $2, $3, $4, convert_to($5, 'UTF8'))`
		exec(ins, ctrlStream.id, dest, "orders\nadmin", "order.created", "{}")
		exec(ins, ctrlType.id, dest, "plain-1", "order\tcreated", "{}")
		exec(ins, big.id, dest, "plain-2", "order.created", payload)
		for _, c := range []string{"outbox_times_finite", "outbox_headers_object"} {
			exec(`ALTER TABLE {outbox} DROP CONSTRAINT backstop_` + c)
		}
		sched := row("scheduled_for '-infinity'", errorhandling.ReasonSerializationError, `column scheduled_for: "-infinity" is not a finite time`)
		headers := row("headers not an object", errorhandling.ReasonSerializationError, `column headers: "[1]" is not a JSON object`)
		exec(`INSERT INTO {outbox} (id, destination, stream, type, scheduled_for) VALUES ($1, $2, 'plain-3', 't', '-infinity')`, sched.id, dest)
		exec(`INSERT INTO {outbox} (id, destination, stream, type, headers) VALUES ($1, $2, 'plain-4', 't', '[1]')`, headers.id, jobs)
		rows = append(rows, sched, headers)
	}
	return rows
}

// dropSQLiteChecks drops the outbox's check triggers (migration 0003), as
// in a database that held rows from before them.
func dropSQLiteChecks(t *testing.T, s *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.DB().QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'backstop_outbox_check_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		if _, err := s.DB().ExecContext(ctx, `DROP TRIGGER `+n); err != nil {
			t.Fatal(err)
		}
	}
}

// countID is how many requests carried message id (as webhook-id).
func (h *hook) countID(id uuid.UUID) int {
	n := 0
	for _, rq := range h.requests() {
		if rq.id == id.String() {
			n++
		}
	}
	return n
}
