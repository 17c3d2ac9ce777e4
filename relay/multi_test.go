package relay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

func TestTwoRelaysOnOneDatabaseDeliverEachMessageOnce(t *testing.T) {
	t.Parallel()
	t.Run("a handle each", func(t *testing.T) { t.Parallel(); twoRelays(t, false) })
	t.Run("one shared store", func(t *testing.T) { t.Parallel(); twoRelays(t, true) })
}

// twoRelays runs two relays over one SQLite file, through two store
// handles (two processes) or one shared.
func twoRelays(t *testing.T, shared bool) {
	ctx := safetyNet(t)
	path := filepath.Join(t.TempDir(), "shared.db")
	open := func() *sqlite.Store { // one handle per "process", on the wall clock
		s, err := sqlite.Open(ctx, path, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s1 := open()
	s2 := s1
	if !shared {
		s2 = open()
	}

	const perStream, streams = 30, 8
	var msgs []*outbox.Message
	for i := range perStream {
		for s := range streams {
			msgs = append(msgs, msg("orders", fmt.Sprintf("s%d", s), i))
		}
		msgs = append(msgs, msg("orders", "", i))
	}
	if err := s1.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var log []string
	byInstance := map[string]int{}
	all := make(chan struct{})
	progress := make(chan struct{}, 1) // a delivery since the test last looked
	deliver := func(instance string) transport.Transport {
		return transport.Func(func(_ context.Context, m *outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			log = append(log, string(m.Payload))
			byInstance[instance]++
			if len(log) == len(msgs) {
				close(all)
			}
			select {
			case progress <- struct{}{}:
			default:
			}
			return nil
		})
	}
	start := func(s *sqlite.Store, id string) (*Relay, chan error) {
		r, err := New(s, Config{
			Instance:     store.Instance{ID: id},
			Destinations: map[string]Destination{"orders": {Transport: deliver(id)}},
			Workers:      4, PollInterval: 20 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		rctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		go func() { done <- r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		return r, done
	}
	r1, _ := start(s1, "relay-1")
	r2, _ := start(s2, "relay-2")
	// The relays are on the wall clock, and on a loaded machine their
	// deliveries take tens of seconds (SQLite under -race on a fraction
	// of a core): what is waited for is progress. A fixed 30 s for them
	// all failed healthy runs. A relay starved of CPU holds the heads of
	// the streams it claimed until their lease lapses, so a stall is no
	// delivery for two leases.
	stall := 2 * s1.Config().LeaseDuration
	stalled := time.NewTimer(stall)
	defer stalled.Stop()
	for waiting := true; waiting; {
		select {
		case <-all:
			waiting = false
		case <-progress:
			stalled.Reset(stall)
		case <-stalled.C:
			mu.Lock()
			n := len(log)
			mu.Unlock()
			t.Fatalf("delivered %d of %d, then none for %s", n, len(msgs), stall)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(log) != len(msgs) {
		t.Fatalf("delivered %d times, want %d", len(log), len(msgs))
	}
	count := map[string]int{}
	last := map[string]int{}
	for _, p := range log {
		count[p]++
		parts := strings.Split(p, "-") // payload-<stream>-<n>
		var n int
		fmt.Sscan(parts[2], &n)
		if parts[1] == "" {
			continue
		}
		if prev, ok := last[parts[1]]; ok && n < prev {
			t.Errorf("stream %s: %d delivered after %d", parts[1], n, prev)
		}
		last[parts[1]] = n
	}
	for _, m := range msgs {
		if count[string(m.Payload)] != 1 {
			t.Errorf("%s delivered %d times", m.Payload, count[string(m.Payload)])
		}
	}
	t.Logf("relay-1 delivered %d, relay-2 %d; stats %+v / %+v",
		byInstance["relay-1"], byInstance["relay-2"], r1.Stats(), r2.Stats())
}

// notifyingStore is a store that tells the relay when messages are
// enqueued (store.Notifier).
type notifyingStore struct {
	*sqlite.Store
	enqueued chan struct{}
}

func (s *notifyingStore) Enqueue(ctx context.Context, msgs ...*outbox.Message) error {
	err := s.Store.Enqueue(ctx, msgs...)
	select {
	case s.enqueued <- struct{}{}:
	default:
	}
	return err
}

func (s *notifyingStore) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.enqueued:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

func TestNotificationWakesAnIdleRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ns := &notifyingStore{Store: e.s, enqueued: make(chan struct{}, 1)}
	delivered := make(chan struct{})
	cfg := e.config(map[string]Destination{"orders": {Transport: transport.Func(func(context.Context, *outbox.Message) error {
		close(delivered)
		return nil
	})}})
	cfg.PollInterval, cfg.MaxPollInterval = 25*time.Second, 25*time.Second // the fake clock never gets there
	r, err := New(ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	rn.settle()
	if err := ns.Enqueue(e.ctx, msg("orders", "s", 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-e.waitDone():
		t.Fatal("the notification did not wake the relay")
	}
}
