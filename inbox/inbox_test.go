package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestHandledOnce receives three streams of messages, each twice (the
// source redelivering), and checks that every message was handled once,
// in its stream's order, with its outbox message committed beside it.
func TestHandledOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			if err := e.record(ctx, tx, msg); err != nil {
				return err
			}
			return tx.Enqueue(ctx, &outbox.Message{Destination: "billing", Type: "invoice.requested", Stream: msg.Stream,
				Payload: msg.Payload})
		})
		const streams, per = 3, 5
		want := map[string][]string{}
		for i := range per {
			for s := range streams {
				stream := fmt.Sprintf("order-%d", s)
				id := fmt.Sprintf("m-%d-%d", s, i)
				if e.receive(in, received(id, "order.created", stream)) {
					t.Fatalf("first receipt of %s is a duplicate", id)
				}
				want[stream] = append(want[stream], id+"@1")
			}
		}
		for s := range streams {
			for i := range per {
				if !e.receive(in, received(fmt.Sprintf("m-%d-%d", s, i), "order.created", "whatever")) {
					t.Fatalf("second receipt of m-%d-%d is not a duplicate", s, i)
				}
			}
		}
		rn := e.run(in)
		e.waitFor("every message handled", func() bool { return e.count(`SELECT count(*) FROM `+e.table) == streams*per })
		e.waitFor("the relay to record them", func() bool { return in.Relay().Stats().Delivered == streams*per })
		if err := rn.shutdown(); err != nil {
			t.Fatalf("Run = %v", err)
		}
		got := e.handled()
		for stream, ids := range want {
			if !slices.Equal(got[stream], ids) {
				t.Errorf("stream %s handled %v, want %v", stream, got[stream], ids)
			}
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'billing'`); n != streams*per {
			t.Errorf("%d billing messages in the outbox, want %d", n, streams*per)
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'inbox:orders'`); n != 0 {
			t.Errorf("%d inbox rows left, want 0", n)
		}
		if n := counter(t, e.reg, "backstop_inbox_received_total", "inbox", "orders", "source", "test"); n != streams*per {
			t.Errorf("received_total = %d, want %d", n, streams*per)
		}
		if n := counter(t, e.reg, "backstop_inbox_duplicates_total", "inbox", "orders", "source", "test"); n != streams*per {
			t.Errorf("duplicates_total = %d, want %d", n, streams*per)
		}
		if s := in.Relay().Stats(); s.Failed != 0 || s.DeadLettered != 0 {
			t.Errorf("relay stats %+v, want nothing failed", s)
		}
	})
}

// TestRetriesAndPoison runs a handler that fails twice before it succeeds
// and one that always fails, on the fake clock: the first is handled on
// its third attempt, the second is dead-lettered with its reason after
// three, and strict ordering holds the later message of its stream.
func TestRetriesAndPoison(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		var calls callLog
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			calls.add(msg)
			if err := e.record(ctx, tx, msg); err != nil {
				return err
			}
			switch {
			case msg.ID == "poison":
				return fmt.Errorf("cannot parse order %s", msg.Payload)
			case msg.ID == "flaky" && msg.Attempt < 3:
				return errors.New("inventory service busy")
			}
			return nil
		})
		e.receive(in, received("flaky", "order.created", "a"))
		e.receive(in, received("poison", "order.created", "b"))
		e.receive(in, received("after-poison", "order.created", "b"))
		e.receive(in, received("free", "order.created", "c"))
		e.run(in)
		e.waitFor("flaky handled and poison dead-lettered", func() bool {
			s := in.Relay().Stats()
			return s.Delivered == 2 && s.DeadLettered == 1
		})
		got := e.handled()
		if want := []string{"flaky@3"}; !slices.Equal(got["a"], want) {
			t.Errorf("stream a committed %v, want %v (failed attempts roll back)", got["a"], want)
		}
		if len(got["b"]) != 0 {
			t.Errorf("stream b committed %v, want nothing: poison failed and strict order holds the rest", got["b"])
		}
		if c := calls.String(); !strings.Contains(c, "poison@1") || !strings.Contains(c, "poison@3") || strings.Contains(c, "after-poison") {
			t.Errorf("calls %s: want poison tried three times and after-poison held back", c)
		}
		entries, err := e.s.DLQ().List(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("%d dead letters, want 1", len(entries))
		}
		d := entries[0]
		if d.Reason != errorhandling.ReasonPoisonMessage || d.Attempts != 3 || d.Destination != "inbox:orders" ||
			!strings.Contains(d.ErrorMessage, "cannot parse order") || d.Headers[HeaderID] != "poison" {
			t.Errorf("dead letter = reason %v, attempts %d, destination %q, error %q, headers %v",
				d.Reason, d.Attempts, d.Destination, d.ErrorMessage, d.Headers)
		}
	})
}

// TestUnknownType dead-letters a message no handler takes, at once under
// a negative NoHandlerWait, with a reason naming its type; after a
// handler is registered, replaying it handles it.
func TestUnknownType(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		cfg := e.config()
		cfg.NoHandlerWait = -1
		in := e.newInbox(cfg)
		e.receive(in, received("m-1", "order.refunded", "o-1"))
		e.run(in)
		e.waitFor("the dead letter", func() bool { return in.Relay().Stats().DeadLettered == 1 })
		entries, err := e.s.DLQ().List(e.ctx, nil)
		if err != nil || len(entries) != 1 {
			t.Fatalf("List = %d entries, %v; want 1", len(entries), err)
		}
		d := entries[0]
		if d.Reason != errorhandling.ReasonValidationFailure || !strings.Contains(d.ErrorMessage, `no handler for message type "order.refunded"`) {
			t.Fatalf("dead letter reason %v, error %q; want ValidationFailure naming the type", d.Reason, d.ErrorMessage)
		}
		in.Handle("order.refunded", func(ctx context.Context, tx store.Tx, msg *Message) error { return e.record(ctx, tx, msg) })
		if err := e.s.DLQ().Replay(e.ctx, d.ID); err != nil {
			t.Fatalf("Replay: %v", err)
		}
		e.waitFor("the replayed message handled", func() bool { return e.count(`SELECT count(*) FROM `+e.table) == 1 })
	})
}

// TestHandleFunc runs a handler without a transaction and a permanent
// failure, which dead-letters at once with the handler's reason.
func TestHandleFunc(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		var calls callLog
		in.HandleFunc("ping", func(ctx context.Context, msg *Message) error {
			calls.add(msg)
			if msg.ID == "bad" {
				return errorhandling.Permanent(errors.New("ping without a target"))
			}
			if msg.Headers["X-Tenant"] != "acme" || msg.Source != "test" || msg.Inbox != "orders" || msg.RowID.String() == "" {
				return errorhandling.Permanent(fmt.Errorf("message fields %+v", msg))
			}
			return nil
		})
		r := received("good", "ping", "")
		r.Headers = map[string]string{"X-Tenant": "acme", HeaderID: "forged"}
		e.receive(in, r)
		e.receive(in, received("bad", "ping", ""))
		e.run(in)
		e.waitFor("both handled", func() bool {
			s := in.Relay().Stats()
			return s.Delivered == 1 && s.DeadLettered == 1
		})
		if c := calls.String(); c != "good@1 bad@1" && c != "bad@1 good@1" {
			t.Errorf("calls %q", c)
		}
		entries, _ := e.s.DLQ().List(e.ctx, nil)
		if len(entries) != 1 || entries[0].Reason != errorhandling.ReasonValidationFailure || entries[0].Attempts != 1 {
			t.Fatalf("dead letters %+v, want one ValidationFailure after 1 attempt", entries)
		}
	})
}
