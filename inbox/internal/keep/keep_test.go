package keep

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newInbox opens an inbox on a fresh SQLite file.
func newInbox(tb testing.TB) *inbox.Inbox {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "keep.db"), store.Config{})
	if err != nil {
		tb.Fatalf("open SQLite: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	in, err := inbox.New(st, inbox.Config{Name: "keep"})
	if err != nil {
		tb.Fatalf("inbox: %v", err)
	}
	return in
}

// BenchmarkStoreHeld stores messages as the NATS receiver does, with a
// held func and a beat far longer than a store call takes.
func BenchmarkStoreHeld(b *testing.B) {
	in := newInbox(b)
	ctx := context.Background()
	var beats atomic.Int64
	held := func() { beats.Add(1) }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		msg := inbox.Received{ID: "m-" + strconv.Itoa(i), Type: "t", Payload: []byte(`{}`)}
		if err := Store(ctx, in, msg, time.Second, quiet, slog.String("subject", "s"), held, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	if beats.Load() != 0 {
		b.Fatalf("%d beats for store calls far quicker than the beat", beats.Load())
	}
}

// BenchmarkStoreUnheld is BenchmarkStoreHeld without a held func (the
// RabbitMQ receiver): what a message costs without any heartbeat.
func BenchmarkStoreUnheld(b *testing.B) {
	in := newInbox(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		msg := inbox.Received{ID: "m-" + strconv.Itoa(i), Type: "t", Payload: []byte(`{}`)}
		if err := Store(ctx, in, msg, time.Second, quiet, slog.String("subject", "s"), nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat is the heartbeat of one quick store call alone:
// armed and stopped before its first beat.
func BenchmarkHeartbeat(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		startHeart(ctx, time.Minute, func() {}, quiet, slog.String("subject", "s")).stop()
	}
}

// TestQuickStoreStartsNoGoroutine: a store call that ends before the
// first beat (almost all of them) cost a goroutine and a ticker per
// message; the heart is now a timer alone until it first beats.
func TestQuickStoreStartsNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	h := startHeart(context.Background(), time.Hour, func() { t.Error("held before the first beat") }, quiet, slog.String("subject", "s"))
	during := runtime.NumGoroutine()
	h.stop()
	if during != before {
		t.Fatalf("%d goroutines while storing, %d before: the heart started one before its first beat", during, before)
	}
}

// TestHeartBeatsUntilStopped: a store call that takes long is held every
// beat, warned about once, and not held again once stop returns.
func TestHeartBeatsUntilStopped(t *testing.T) {
	var (
		beats   = make(chan struct{})
		stopped atomic.Bool
		logged  = &countHandler{}
	)
	h := startHeart(context.Background(), time.Millisecond, func() {
		if stopped.Load() {
			t.Error("held after stop returned")
		}
		select {
		case beats <- struct{}{}:
		default:
		}
	}, slog.New(logged), slog.String("subject", "s"))
	for range 3 {
		<-beats
	}
	h.stop()
	stopped.Store(true)
	if n := logged.n.Load(); n != 1 {
		t.Fatalf("%d warnings about a store call taking long, want 1", n)
	}
}

// TestHeartStopsWithItsContext: a beat once the receiver shuts down holds
// nothing and arms no other.
func TestHeartStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := startHeart(ctx, time.Hour, func() { t.Error("held after its context was done") }, quiet, slog.String("subject", "s"))
	defer h.stop()
	cancel()
	h.fire()
	if h.beats != 0 {
		t.Fatalf("%d beats after the context was done", h.beats)
	}
}

// countHandler counts the records logged at WARN or above.
type countHandler struct{ n atomic.Int64 }

func (c *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (c *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		c.n.Add(1)
	}
	return nil
}
func (c *countHandler) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countHandler) WithGroup(string) slog.Handler      { return c }
