package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// testTimeout bounds each test: a safety net, never a wait.
const testTimeout = 45 * time.Second

// destName is the destination every message goes to.
const destName = "orders"

// The messages a test writes: perStream messages on each of streams
// streams, and as many without a stream, interleaved the way concurrent
// requests would write them.
const (
	streams   = 5
	perStream = 10
)

// forEach runs test for every store and every destination, in parallel:
// each has a database (a SQLite file, a PostgreSQL schema) and a
// destination (a server, a stream, an exchange and queue) of its own.
func forEach(t *testing.T, test func(t *testing.T, db databaseKind, dest destinationKind)) {
	for _, db := range databases {
		for _, dest := range destinations {
			t.Run(db.name+"/"+dest.name, func(t *testing.T) {
				t.Parallel()
				test(t, db, dest)
			})
		}
	}
}

// orderMessages returns new messages: for each n, message n of every
// stream, then one message without a stream. Their ids are set, so that
// the application can store them next to its own rows.
func orderMessages(t *testing.T, tag string) []*outbox.Message {
	t.Helper()
	var msgs []*outbox.Message
	add := func(stream string, n int) {
		id, err := uuid.NewV7()
		if err != nil {
			t.Fatal(err)
		}
		typ := "order.created"
		if n%2 == 1 {
			typ = "order.paid"
		}
		msgs = append(msgs, &outbox.Message{
			ID:          id,
			Destination: destName,
			Stream:      stream,
			Type:        typ,
			Payload:     fmt.Appendf(nil, `{"tag":%q,"order":%q,"n":%d}`, tag, stream, n),
			Headers:     map[string]string{"X-Tenant": "acme-" + tag},
		})
	}
	for n := range perStream {
		for s := range streams {
			add(fmt.Sprintf("order-%d", s), n)
		}
		add("", n)
	}
	return msgs
}

// sendLog counts, per relay instance and message, the deliveries its
// transport reported successful.
type sendLog struct {
	mu sync.Mutex
	n  map[string]map[uuid.UUID]int
}

func newSendLog() *sendLog { return &sendLog{n: map[string]map[uuid.UUID]int{}} }

// tap returns tr counting into l under instance.
func (l *sendLog) tap(instance string, tr transport.Transport) transport.Transport {
	return &tapped{Transport: tr, instance: instance, log: l}
}

// count returns how many times instance sent id; an empty instance
// counts every instance's sends.
func (l *sendLog) count(instance string, id uuid.UUID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for in, ids := range l.n {
		if instance == "" || in == instance {
			n += ids[id]
		}
	}
	return n
}

// total returns the number of successful sends.
func (l *sendLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ids := range l.n {
		for _, c := range ids {
			n += c
		}
	}
	return n
}

type tapped struct {
	transport.Transport
	instance string
	log      *sendLog
}

func (t *tapped) Deliver(ctx context.Context, m *outbox.Message) error {
	err := t.Transport.Deliver(ctx, m)
	if err == nil {
		t.log.mu.Lock()
		if t.log.n[t.instance] == nil {
			t.log.n[t.instance] = map[uuid.UUID]int{}
		}
		t.log.n[t.instance][m.ID]++
		t.log.mu.Unlock()
	}
	return err
}

// hookedStore is a store as a relay sees it through the test's hooks:
// fail, when set and returning an error, makes ProcessBatch fail without
// reaching the database (the process lost it); every call that reaches
// the database is announced, so that the test waits on store calls
// instead of sleeping; and poke wakes the relay as a store notification
// does.
type hookedStore struct {
	store.Store
	fail      func() error
	batchSize int // the relay's BatchSize, to tell an idle call
	poked     chan struct{}

	mu      sync.Mutex
	idle    int           // calls that found the relay idle
	changed chan struct{} // closed and replaced after every call
}

// hook returns s seen through fail (nil: every call goes through), for a
// relay whose BatchSize is batchSize.
func hook(s store.Store, batchSize int, fail func() error) *hookedStore {
	return &hookedStore{Store: s, fail: fail, batchSize: batchSize, poked: make(chan struct{}, 1), changed: make(chan struct{})}
}

func (h *hookedStore) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if h.fail != nil {
		if err := h.fail(); err != nil {
			return nil, err
		}
	}
	res, err := h.Store.ProcessBatch(ctx, b)
	h.mu.Lock()
	defer h.mu.Unlock()
	// An idle call has room for a whole batch (once the outcomes it
	// records are taken off, the relay holds no message) and claims
	// nothing: the relay found no work it may take, and waits.
	if err == nil && b.Claim.Limit == h.batchSize && len(res.Claimed) == 0 {
		h.idle++
	}
	close(h.changed)
	h.changed = make(chan struct{})
	return res, err
}

// SetWaiting implements store.WakeGate for a store that has one, so that
// the relay's registration reaches it (PostgreSQL notifies only then).
func (h *hookedStore) SetWaiting(ctx context.Context, id string, waiting bool) error {
	if g, ok := h.Store.(store.WakeGate); ok {
		return g.SetWaiting(ctx, id, waiting)
	}
	return nil
}

// Subscribe implements store.Notifier: the inner store's wake-ups, and
// the test's pokes.
func (h *hookedStore) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	var inner <-chan struct{}
	if n, ok := h.Store.(store.Notifier); ok {
		ch, err := n.Subscribe(ctx)
		if err != nil {
			return nil, err
		}
		inner = ch
	}
	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-inner:
				if !ok {
					inner = nil
					continue
				}
				wake()
			case <-h.poked:
				wake()
			}
		}
	}()
	return out, nil
}

// poke wakes the relay.
func (h *hookedStore) poke() {
	select {
	case h.poked <- struct{}{}:
	default:
	}
}

// idleCalls returns how many calls found the relay idle.
func (h *hookedStore) idleCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.idle
}

// waitFor checks cond now and after every store call until it holds.
func (h *hookedStore) waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for {
		h.mu.Lock()
		ch := h.changed
		h.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// running is a relay running in the background.
type running struct {
	r      *relay.Relay
	cancel context.CancelFunc
	done   chan error
	err    error
	once   sync.Once
}

// start runs a relay on s; it is stopped when the test ends, if the test
// has not stopped it.
func start(t *testing.T, ctx context.Context, s store.Store, cfg relay.Config) *running {
	t.Helper()
	r, err := relay.New(s, cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	rn := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(rctx) }()
	t.Cleanup(func() { _ = rn.stop(t) })
	return rn
}

// stop cancels the relay's context, which makes it shut down, and
// returns what Run returned.
func (rn *running) stop(t *testing.T) error {
	t.Helper()
	rn.once.Do(func() {
		rn.cancel()
		select {
		case rn.err = <-rn.done:
		case <-time.After(testTimeout):
			t.Errorf("Run did not return within %v of its context ending", testTimeout)
		}
	})
	return rn.err
}
