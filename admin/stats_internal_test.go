package admin

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// countingStore counts the computations of Stats (each begins with
// RetryDistribution) and, while gate is set, holds each until gate
// closes, saying on entered that it began.
type countingStore struct {
	*sqlite.Store
	n       atomic.Int32
	gate    chan struct{}
	entered chan struct{}
}

func (c *countingStore) RetryDistribution(ctx context.Context) ([]store.AttemptsCount, error) {
	c.n.Add(1)
	if c.gate != nil {
		c.entered <- struct{}{}
		<-c.gate
	}
	return c.Store.RetryDistribution(ctx)
}

func newCountingServer(t *testing.T) (*Server, *countingStore) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingStore{Store: st}
	s, err := New(Config{Store: cs})
	if err != nil {
		t.Fatal(err)
	}
	return s, cs
}

// GET /v1/stats reads the outbox and the dead-letter queue whole; every
// open dashboard asks every 2 s, and three of them starved delivery at a
// million rows. Requests while a computation runs, and for statsTTL
// after, share it; an operator's action makes the next one compute again.
func TestStatsAreComputedOnceForEveryoneAsking(t *testing.T) {
	s, cs := newCountingServer(t)
	cs.gate, cs.entered = make(chan struct{}), make(chan struct{}, 1)
	ctx := context.Background()

	// The first asker gives up while the computation runs: the others
	// still get its answer.
	first, cancelFirst := context.WithCancel(ctx)
	firstErr := make(chan error, 1)
	go func() {
		_, err := s.cachedStats(first)
		firstErr <- err
	}()
	<-cs.entered
	cancelFirst()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the asker that gave up got %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.cachedStats(ctx)
			errs <- err
		}()
	}
	close(cs.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.cachedStats(ctx); err != nil {
		t.Fatal(err)
	}
	if n := cs.n.Load(); n != 1 {
		t.Fatalf("%d computations for 22 askers within statsTTL, want 1", n)
	}

	cs.gate = nil
	s.statsCache.forget()
	if _, err := s.cachedStats(ctx); err != nil {
		t.Fatal(err)
	}
	if n := cs.n.Load(); n != 2 {
		t.Fatalf("%d computations after an operator's action, want 2", n)
	}
}
