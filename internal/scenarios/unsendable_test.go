package scenarios

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store/sqlite"
)

// TestUnsendableRowIsDeadLettered: a row written with plain SQL (which
// outbox validation never saw) carries a header value with a line break,
// which HTTP cannot carry. The webhook transport refuses it before sending
// anything: it is dead-lettered at once as the message's fault, naming
// the header, and the other messages are delivered. The store does not
// matter here, so the scenario runs on SQLite only.
func TestUnsendableRowIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, onSQLite)
	h := e.newHook()
	good := stream("orders", 1)[0]
	e.enqueue(good)
	id := uuid.Must(uuid.NewV7())
	db := e.s.(*sqlite.Store).DB()
	if _, err := db.ExecContext(e.ctx, `INSERT INTO backstop_outbox (id, destination, type, payload, stream, headers)
		VALUES (?, ?, 'order.created', '{"order":7}', 'plain-sql', '{"X-Note":"line one\r\nX-Admin: yes"}')`,
		id.String(), dest); err != nil {
		t.Fatal(err)
	}
	rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{dest: {
		Transport: h.transport("relay-1", false),
	}}})
	e.waitFor("the good message and the dead letter", func() bool { return e.gone(good) && len(e.deadLetters()) == 1 })
	e.settle()

	en := e.deadLetters()[0]
	if en.MessageID != id.String() || en.Reason != errorhandling.ReasonValidationFailure || en.Attempts != 1 {
		t.Fatalf("dead letter = %+v, want the plain-SQL row, ValidationFailure, one attempt", en)
	}
	if !strings.Contains(en.ErrorMessage, `header "X-Note" value holds control character U+000D`) {
		t.Fatalf("dead letter's error %q does not name the header and the character", en.ErrorMessage)
	}
	if n := h.count(`{"order":7}`); n != 0 {
		t.Fatalf("the unsendable row was sent %d times", n)
	}
	if s := rn.r.Stats(); s.Delivered != 1 || s.DeadLettered != 1 || s.Retries != 0 {
		t.Fatalf("stats = %+v, want 1 delivered, 1 dead-lettered, no retries", s)
	}
}
