package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// notInbox is a store without the inbox's tables.
type notInbox struct{ store.Store }

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[0])
	noop := transport.Func(func(context.Context, *outbox.Message) error { return nil })
	cases := []struct {
		name  string
		store store.Store
		cfg   func(*Config)
		want  string
	}{
		{"nil store", nil, nil, "store is nil"},
		{"store without an inbox", notInbox{e.s}, nil, "does not implement store.Inbox"},
		{"empty name", e.s, func(c *Config) { c.Name = "" }, "Name"},
		{"name with a colon", e.s, func(c *Config) { c.Name = "a:b" }, "Name"},
		{"name with NUL", e.s, func(c *Config) { c.Name = "a\x00" }, "Name"},
		{"name too long", e.s, func(c *Config) { c.Name = strings.Repeat("n", MaxNameLen+1) }, "Name"},
		{"destinations", e.s, func(c *Config) { c.Relay.Destinations = map[string]relay.Destination{"x": {Transport: noop}} }, "Relay.Destinations"},
		{"transport", e.s, func(c *Config) { c.Handling.Transport = noop }, "Handling.Transport"},
		{"negative window", e.s, func(c *Config) { c.DedupWindow = -time.Second }, "DedupWindow"},
		{"negative batch", e.s, func(c *Config) { c.SweepBatch = -1 }, "SweepBatch"},
		// Durations written as bare numbers are nanoseconds: 3600 meant
		// an hour and remembered ids for 3.6 µs (every redelivery handled
		// again); 60 meant a minute and swept in a busy loop.
		{"window in nanoseconds", e.s, func(c *Config) { c.DedupWindow = 3600 }, "DedupWindow"},
		{"sweep interval in nanoseconds", e.s, func(c *Config) { c.SweepInterval = 60 }, "SweepInterval"},
		{"negative limit", e.s, func(c *Config) { c.Limits.MaxHeaders = -1 }, "Limits"},
		{"bad relay config", e.s, func(c *Config) { c.Relay.PollInterval = time.Nanosecond }, "PollInterval"},
	}
	for _, c := range cases {
		cfg := e.config()
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		_, err := New(c.store, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error naming %s", c.name, err, c.want)
		}
	}
	in := e.newInbox(e.config())
	if err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = errors.New("panicked")
			}
		}()
		in.Handle("a", func(context.Context, store.Tx, *Message) error { return nil })
		in.HandleFunc("a", func(context.Context, *Message) error { return nil })
		return nil
	}(); err == nil {
		t.Error("a second handler for one type did not panic")
	}
	if _, err := in.Receive(e.ctx, Received{Type: "a"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Receive without an id: %v, want ErrInvalid", err)
	}
	if _, err := in.Receive(e.ctx, Received{ID: "x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Receive without a type: %v, want ErrInvalid", err)
	}
	if _, err := in.Receive(e.ctx, Received{ID: "y", Type: "a", Headers: map[string]string{"Bad Name": "v"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Receive with a header name that is not a token: %v, want ErrInvalid", err)
	}
	if n := counter(t, e.reg, "backstop_inbox_rejected_total", "inbox", "orders", "source", "custom"); n != 3 {
		t.Errorf("rejected_total = %d, want 3", n)
	}
}

// TestSweepRuns checks that Run sweeps the records of handled messages
// older than the window on its interval, on the fake clock, so an id
// received again after the window is a new message.
func TestSweepRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[0])
	cfg := e.config()
	cfg.DedupWindow, cfg.SweepInterval, cfg.SweepBatch = 2*time.Minute, time.Minute, 2
	in := e.newInbox(cfg)
	in.HandleFunc("x", func(context.Context, *Message) error { return nil })
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		e.receive(in, received(id, "x", ""))
	}
	e.run(in)
	e.waitFor("five records swept", func() bool {
		return counter(t, e.reg, "backstop_inbox_swept_total", "inbox", "orders") == 5
	})
	if e.receive(in, received("a", "x", "")) {
		t.Error("an id received after the window is still a duplicate")
	}
}

// TestLeaseLostRollsBack dead-letters a message by hand while its
// transactional handler runs (PostgreSQL: SQLite's single writer holds
// the operator back until the handler ends): the handler's writes are
// rolled back, nothing is recorded against the message, and a replay
// handles it once.
func TestLeaseLostRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[1])
	in := e.newInbox(e.config())
	inside, release := make(chan *Message, 1), make(chan struct{})
	var calls callLog
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
		calls.add(msg)
		if err := e.record(ctx, tx, msg); err != nil {
			return err
		}
		if calls.len() == 1 {
			inside <- msg
			<-release
		}
		return nil
	})
	e.receive(in, received("m-1", "order.created", "o-1"))
	e.run(in)
	var msg *Message
	select {
	case msg = <-inside:
	case <-e.ctx.Done():
		t.Fatal("the handler was not called")
	}
	if err := e.s.DeadLetter(e.ctx, msg.RowID, "operator: wrong customer"); err != nil {
		t.Fatal(err)
	}
	close(release)
	e.waitFor("the stale outcome recorded", func() bool { return in.Relay().Stats().InFlight == 0 })
	if n := e.count(`SELECT count(*) FROM ` + e.table); n != 0 {
		t.Fatalf("%d rows committed by a handler that lost its lease, want 0", n)
	}
	entries, err := e.s.DLQ().List(e.ctx, nil)
	if err != nil || len(entries) != 1 {
		t.Fatalf("dead letters %d, %v; want the operator's one", len(entries), err)
	}
	if err := e.s.DLQ().Replay(e.ctx, entries[0].ID); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the replay handled", func() bool { return e.count(`SELECT count(*) FROM `+e.table) == 1 })
	if c := calls.String(); c != "m-1@1 m-1@1" {
		t.Errorf("calls %q, want two (the lost one and the replay)", c)
	}
}

// TestSweepKeepsUpWithAnyRate: one sweep deletes every record past the
// window, in as many batches as that takes. It stopped after 100 batches,
// so with the default batch an inbox receiving over about 1,667 messages a
// second for good (100,000 a minute) outgrew its sweep and its records
// table grew without end.
func TestSweepKeepsUpWithAnyRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[0])
	cfg := e.config()
	cfg.DedupWindow, cfg.SweepInterval, cfg.SweepBatch = time.Minute, -1, 2
	in := e.newInbox(cfg)
	const n = 250 // 125 batches of 2
	for i := range n {
		e.receive(in, received(fmt.Sprint("m-", i), "x", ""))
	}
	// handled: a record is not swept while its message waits
	e.exec(`DELETE FROM ` + kinds[0].outbox(e.spec) + ` WHERE destination = 'inbox:orders'`)
	e.clk.Advance(2 * time.Minute)
	swept, err := in.Sweep(e.ctx)
	if err != nil || swept != n {
		t.Fatalf("Sweep = %d, %v; want all %d records past the window", swept, err, n)
	}
}
