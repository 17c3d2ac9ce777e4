package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// hangingCount is a store whose PendingByDestination waits until its call
// ends, as on a connection that stopped answering (a partition).
type hangingCount struct {
	*sqlite.Store
	called chan struct{}
	once   sync.Once
}

func (h *hangingCount) PendingByDestination(ctx context.Context) (map[string]int, error) {
	h.once.Do(func() { close(h.called) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStopEndsAMaintenanceCallThatHangs: a relay stopped while its
// maintainer's store call hangs returns. The call had no deadline and
// Run waits for the maintainer: a SIGTERMed serve behind a partition from
// PostgreSQL never exited.
func TestStopEndsAMaintenanceCallThatHangs(t *testing.T) {
	e := newEnv(t)
	h := &hangingCount{Store: e.s, called: make(chan struct{})}
	r, err := New(h, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil { // its first turn is over
		t.Fatal(err)
	}
	e.clk.Advance(r.heartbeatEvery()) // the second turn counts pending messages
	select {
	case <-h.called:
	case <-e.waitDone():
		t.Fatal("the maintainer never counted")
	}
	if err := rn.stop(); err != nil {
		t.Logf("Run: %v", err)
	}
}

// TestStoreDownKeepsTheErrorBackOff: with deliveries in flight and their
// renewal due, a failed store call keeps its back-off. The renewal's time
// only moves when a call succeeds, so while the store was down every wait
// was zero: the claimer spun at full CPU, logging a thousand lines a
// second. When the store answers, the renewal shortens the wait again.
func TestStoreDownKeepsTheErrorBackOff(t *testing.T) {
	e := newEnv(t)
	r := e.newRelay(e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	l := newLoop(r)
	m := msg("d", "s", 1)
	r.fl.mu.Lock()
	r.fl.add(&flight{m: m, until: e.clk.Now().Add(time.Minute)})
	r.fl.mu.Unlock()
	l.lastRenew = e.clk.Now().Add(-2 * l.renewEvery) // the renewal is overdue
	l.failing = true
	if got := l.shortened(5 * time.Second); got != 5*time.Second {
		t.Errorf("wait after a failed call with a renewal due: %v, want the back-off (5s)", got)
	}
	l.failing = false
	if got := l.shortened(5 * time.Second); got != 0 {
		t.Errorf("wait after a call that succeeded with a renewal due: %v, want 0 (renew now)", got)
	}
}

// refusingRenewals is a store that refuses every lease renewal, as when
// another instance took the messages: a message whose renewal it refused
// is never claimed here again (the other instance holds it). Without
// that, this relay claimed the message again once its lease lapsed, and
// held it again, and the test saw a second try it rightly made.
type refusingRenewals struct {
	*sqlite.Store
	mu    sync.Mutex
	taken map[uuid.UUID]bool
}

func (s *refusingRenewals) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	renew := b.RenewLeases
	b.RenewLeases = nil
	res, err := s.Store.ProcessBatch(ctx, b)
	if err != nil {
		return res, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		s.taken = map[uuid.UUID]bool{}
	}
	for _, id := range renew {
		s.taken[id] = true
	}
	res.Stale = append(res.Stale, renew...)
	kept := res.Claimed[:0]
	for _, m := range res.Claimed {
		if !s.taken[m.ID] {
			kept = append(kept, m)
		}
	}
	res.Claimed = kept
	return res, nil
}

// TestNoInProcessRetryAfterTheLeaseLapsed: a delivery fails and waits 20 s
// to be tried again in-process; meanwhile its lease is lost. The second
// try is not made: another instance may hold the message now, and that try
// could overtake its deliveries of the stream. The message is given back
// without charge.
func TestNoInProcessRetryAfterTheLeaseLapsed(t *testing.T) {
	e := newEnv(t)
	m := msg("d", "s", 1)
	e.enqueue(m)
	tried := make(chan struct{}, 4)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		tried <- struct{}{}
		return errorhandling.Transient(errors.New("503"))
	}}
	cfg := e.config(map[string]Destination{"d": {Transport: rec.transport(),
		InProcess: retry.NewConfig(2, retry.NewFixedDelay(20*time.Second, false))}})
	r, err := New(&refusingRenewals{Store: e.s}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	select {
	case <-tried:
	case <-e.waitDone():
		t.Fatal("never tried")
	}
	before := r.rounds.Load()
	e.clk.Advance(r.cfg.LeaseDuration / 2) // a renewal is due: refused
	r.wake()
	if err := r.turned.wait(e.ctx, before); err != nil {
		t.Fatal(err)
	}
	rn.waitFor("the lease lost", func() bool { return r.Stats().LeasesLost > 0 })
	rn.waitFor("the delivery to end", func() bool {
		e.clk.Advance(time.Second) // to the end of the wait between tries
		return len(rec.got()) > 1 || len(e.logs.find("lease lapsed between in-process tries")) > 0
	})
	if n := len(rec.got()); n != 1 {
		t.Fatalf("%d tries, want 1: the second was made after the lease was lost", n)
	}
}

// hangingClaim is a store whose claims, once hang is set, wait until their
// call ends, as behind a partition from the database.
type hangingClaim struct {
	*sqlite.Store
	hang   chan struct{} // closed: claims from now on hang
	called chan struct{} // closed when one hangs
	ended  chan error    // why the hanging claim ended
	once   sync.Once
}

func (h *hangingClaim) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	select {
	case <-h.hang:
	default:
		return h.Store.ProcessBatch(ctx, b)
	}
	h.once.Do(func() { close(h.called) })
	<-ctx.Done()
	select {
	case h.ended <- ctx.Err():
	default:
	}
	return nil, ctx.Err()
}

// TestShutdownEndsAClaimThatHangs: a relay stopped while its claim hangs
// ends that call at ShutdownTimeout. The claimer's calls ran on a context
// Run's cancellation did not reach, each bounded only by the 30 s store
// call timeout: a SIGTERMed serve with shutdown_timeout 3s behind a
// silent database took 85 s to exit.
func TestShutdownEndsAClaimThatHangs(t *testing.T) {
	e := newEnv(t)
	h := &hangingClaim{Store: e.s, hang: make(chan struct{}), called: make(chan struct{}), ended: make(chan error, 1)}
	cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
	cfg.ShutdownTimeout = 50 * time.Millisecond
	r, err := New(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	close(h.hang) // the first claim hangs
	rn := e.run(r)
	select {
	case <-h.called:
	case <-e.waitDone():
		t.Fatal("the relay never claimed")
	}
	rn.cancel()
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the hanging claim ended with %v, want it cancelled at ShutdownTimeout", err)
		}
	case <-time.After(20 * time.Second): // the store call's own timeout is 30 s
		t.Fatal("the hanging claim was not ended at ShutdownTimeout")
	}
	if err := rn.stop(); err != nil {
		t.Logf("Run: %v", err)
	}
}
