package natsinbox

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestHostileMessages publishes messages that no receiver should store
// (an id with a NUL, invalid UTF-8, a C1 control, over MaxIDLen; a stream
// or type with a control character, a type over its limit, a payload over
// the inbox's limit) and messages odd but storable, then a plain one
// behind them all, through one consumer with one message in flight: the
// refused ones are terminated (not redelivered, the consumer not held),
// the others stored and handled once, and the last one gets through.
func TestHostileMessages(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		src := newSource(t, e.Ctx, js, 30*time.Second)
		cfg := e.Config()
		cfg.Limits.MaxPayloadBytes = 4096
		in := e.NewInbox(cfg)
		var handled inboxtest.Tally
		in.HandleFunc("order.created", handled.Handle)
		publish := func(id, typ, stream string, payload []byte, hdr map[string]string) {
			t.Helper()
			m := nats.NewMsg(src.prefix + ".order")
			if id != "" {
				m.Header.Set(jetstream.MsgIDHeader, id)
			}
			m.Header.Set(HeaderType, typ)
			if stream != "" {
				m.Header.Set(HeaderStream, stream)
			}
			for k, v := range hdr {
				m.Header[k] = []string{v}
			}
			m.Data = payload
			if _, err := js.PublishMsg(e.Ctx, m); err != nil {
				t.Fatalf("publish %q: %v", id, err)
			}
		}
		refused := append(slices.Clone(inboxtest.Refused), []inboxtest.Hostile{
			{ID: "tab\tid", Type: "order.created"},
			{ID: strings.Repeat("l", inbox.MaxIDLen+1), Type: "order.created"},
			{ID: "bad-stream", Type: "order.created", Stream: "s\x01"},
			{ID: "bad-stream-utf8", Type: "order.created", Stream: "s\xc3"},
			{ID: "long-type", Type: strings.Repeat("t", 1000)},
		}...)
		for _, r := range refused {
			publish(r.ID, r.Type, r.Stream, nil, nil)
		}
		publish("big-payload", "order.created", "", bytes.Repeat([]byte("x"), 4097), nil)
		kept := []string{
			inboxtest.QuotedID,
			strings.Repeat("m", inbox.MaxIDLen),
			"line\u2028sep",
			"odd-headers",
		}
		for _, id := range kept[:3] {
			publish(id, "order.created", "s-1", []byte("{}"), nil)
		}
		publish("odd-headers", "order.created", "s-1", bytes.Repeat([]byte("y"), 4096), map[string]string{
			"X-Nul": inboxtest.NULValue, "X-Bad": inboxtest.BadUTF8, "X-Big": inboxtest.HugeValue, "X-Ok": "ok",
		})
		publish("last", "order.created", "s-1", nil, nil)

		r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("the last message handled", func() bool { return handled.Of("last") == 1 })
		e.WaitFor("the consumer to have nothing pending", func() bool {
			info, err := src.consumer.Info(e.Ctx)
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0
		})
		e.WaitFor("every stored message handled", func() bool { return in.Relay().Stats().Delivered == int64(len(kept)+1) })
		handled.CheckOnce(t, append(kept, "last")...)
		if n := e.Counter("backstop_inbox_rejected_total", "source", "nats"); n != len(refused)+1 {
			t.Errorf("rejected_total = %d, want %d", n, len(refused)+1)
		}
	})
}

// TestTwoInstancesManyRedeliveries runs two inbox instances on one store,
// each with a receiver on its own durable consumer of one stream (so that
// every message reaches both at about the same time), and has each
// receiver refuse the first three deliveries of every message after
// storing it, so that it comes again: every message is handled once.
func TestTwoInstancesManyRedeliveries(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		src := newSource(t, e.Ctx, js, 30*time.Second)
		const n = 40
		var ins []*inbox.Inbox
		for i, durable := range []string{"a", "b"} {
			c, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: durable,
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 8})
			if err != nil {
				t.Fatal(err)
			}
			cfg := e.Config()
			cfg.Metrics = nil
			if i == 0 {
				cfg.Metrics = e.Reg
			}
			in := e.NewInbox(cfg)
			in.Handle("order.created", e.Record)
			r, err := New(Config{Inbox: in, Consumer: c, Logger: inboxtest.Quiet, NakDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r.ack = func(m jetstream.Msg) bool {
				meta, err := m.Metadata()
				return err == nil && meta.NumDelivered > 3
			}
			e.Go("receiver "+durable, r.Run)
			e.Go("inbox "+durable, in.Run)
			ins = append(ins, in)
		}
		var want []string
		for i := range n {
			id := fmt.Sprintf("m%02d", i)
			src.publish(t, e.Ctx, id, fmt.Sprintf("s%d", i%4))
			want = append(want, id+"@1")
		}
		e.WaitFor("both consumers drained", func() bool {
			for _, d := range []string{"a", "b"} {
				c, err := js.Consumer(e.Ctx, src.stream, d)
				if err != nil {
					return false
				}
				info, err := c.Info(e.Ctx)
				if err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
					return false
				}
			}
			return true
		})
		e.WaitFor("every message handled", func() bool {
			return ins[0].Relay().Stats().Delivered+ins[1].Relay().Stats().Delivered == n
		})
		var got []string
		for _, s := range e.Handled() {
			got = append(got, s...)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("handled %v, want each of %d once", got, n)
		}
		if rows := e.OutboxRows(ins[0].DestinationName()); rows != 0 {
			t.Errorf("%d inbox rows left, want 0", rows)
		}
	})
}

// TestStoreConnectionCutWhileReceiving runs the inbox on a PostgreSQL
// store reached through a proxy and cuts every connection of the store
// after every third message is stored, before its ack, and again while
// the receiver stores the next: a message whose store failed is not
// acknowledged but refused, comes again and is stored; every message is
// handled once, in order.
func TestStoreConnectionCutWhileReceiving(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[1])
	s, p := e.StoreThroughProxy()
	src := newSource(t, e.Ctx, js, 30*time.Second)
	in, err := inbox.New(s, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	in.Handle("order.created", e.Record)
	r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: inboxtest.Quiet, NakDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.afterStore = func(m jetstream.Msg) {
		if meta, err := m.Metadata(); err == nil && meta.NumDelivered == 1 && meta.Sequence.Stream%3 == 0 {
			p.Cut()
		}
	}
	const n = 30
	var want []string
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		src.publish(t, e.Ctx, id, "s")
		want = append(want, id)
	}
	e.Go("receiver", r.Run)
	e.Go("inbox", in.Run)
	// A cut can also take a handler's transaction (the attempt fails and
	// is tried again) or the answer to its commit (the relay does not
	// count the message delivered): wait for the rows, not the stats.
	e.WaitFor("every message handled", func() bool { return e.Rows() >= n && e.OutboxRows(in.DestinationName()) == 0 })
	var got []string
	for _, h := range e.Handled()["s"] {
		got = append(got, h[:strings.IndexByte(h, '@')])
	}
	if !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v, each once", got, want)
	}
	e.WaitFor("the consumer to have nothing pending", func() bool {
		info, err := src.consumer.Info(e.Ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// TestStoreClosedWhileReceiving closes the inbox's SQLite store under a
// running receiver: the message that arrives meanwhile is not
// acknowledged but held and tried again, given back when the receiver
// stops, and handled once by a receiver on the store opened again.
// (Against NATS server 2.9 the second receiver has it only after the
// consumer's AckWait, 30 s here: the server does not act on that Nak,
// where it does on one for a message the receiver held without trying to
// store it, TestShutdownGivesBackWhatItHolds. Not found why.)
func TestStoreClosedWhileReceiving(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	k := inboxtest.Kinds[0]
	e := inboxtest.NewEnv(t, k)
	src := newSource(t, e.Ctx, js, 30*time.Second)
	in := e.NewInbox(e.Config())
	log, failures := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: log, NakDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src.publish(t, e.Ctx, "before", "s")
	stored := make(chan struct{}, 1)
	r.afterStore = func(jetstream.Msg) { stored <- struct{}{} }
	stop := e.Start("Run", r.Run)
	inboxtest.Await(t, e.Ctx, "the first message stored", stored, 1)
	if err := e.S.Close(); err != nil {
		t.Fatal(err)
	}
	src.publish(t, e.Ctx, "during", "s")
	inboxtest.Await(t, e.Ctx, "two failed tries", failures, 2)
	stop()

	e2 := inboxtest.OpenEnv(t, k, e.Spec, e.Clk)
	in2 := e2.RecordingInbox()
	cons, err := js.Consumer(e.Ctx, src.stream, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := New(Config{Inbox: in2, Consumer: cons, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	e2.Go("receiver", r2.Run)
	e2.Go("inbox", in2.Run)
	e2.WaitHandled(in2, "s", "before@1", "during@1")
}
