package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// faultyStore is a SQLite store whose relay calls (ProcessBatch) and
// reads (Get) go through batch: a store that is down, or one whose driver
// hangs.
type faultyStore struct {
	*sqlite.Store
	batch func(ctx context.Context) error
}

func (f *faultyStore) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if err := f.batch(ctx); err != nil {
		return nil, err
	}
	return f.Store.ProcessBatch(ctx, b)
}

func (f *faultyStore) Get(ctx context.Context, id uuid.UUID) (*outbox.Message, error) {
	if err := f.batch(ctx); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, id)
}

// runRelay runs a relay on st until the test ends, and returns the health
// of a serve process around it, on a clock offset from the wall clock by
// *offset.
func runRelay(t *testing.T, st store.Store, offset *time.Duration) (*relay.Relay, *health) {
	t.Helper()
	r, err := relay.New(st, relay.Config{
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 10 * time.Millisecond,
		Destinations: map[string]relay.Destination{"billing": {Transport: transport.Func(func(context.Context, *outbox.Message) error { return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, &health{checks: []check{storeCheck(st)}, lastRound: r.LastRound, maxPoll: 10 * time.Millisecond,
		now: func() time.Time { return time.Now().Add(*offset) }}
}

func openTestSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// get calls a health handler and decodes its JSON answer.
func get(t *testing.T, h http.HandlerFunc, target string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s answered %d %q, not JSON: %v", target, rec.Code, rec.Body.String(), err)
	}
	return rec.Code, body
}

// failed returns the checks of a /readyz answer that failed, by name, with
// their errors.
func failed(body map[string]any) map[string]string {
	out := map[string]string{}
	checks, _ := body["checks"].([]any)
	for _, c := range checks {
		m, _ := c.(map[string]any)
		if ok, _ := m["ok"].(bool); !ok {
			e, _ := m["error"].(string)
			out[m["name"].(string)] = e
		}
	}
	return out
}

// TestHealthWhileTheStoreIsDown: with the store down, /readyz says 503
// and names the store and its error; /healthz stays 200, for the relay's
// loop goes on (its calls fail): restarting the process would not bring
// the store back. /readyz answered "store unavailable" with no cause, and
// /healthz was 200 whatever happened.
func TestHealthWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	calls := make(chan struct{}, 100)
	down := errors.New("dial tcp 10.0.0.5:5432: connect: connection refused")
	st := &faultyStore{Store: openTestSQLite(t), batch: func(context.Context) error {
		select {
		case calls <- struct{}{}:
		default:
		}
		return down
	}}
	var offset time.Duration
	r, h := runRelay(t, st, &offset)
	<-calls
	before := time.Now()
	// Two more calls: the round of the first has finished, and another.
	<-calls
	<-calls
	if last := r.LastRound(); !last.After(before) {
		t.Fatalf("the relay's last round at %s, not after %s: its rounds stopped while the store failed", last, before)
	}
	if code, body := get(t, h.healthz, "/healthz"); code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("/healthz with the store down = %d %v, want 200: a dependency down is no cause for a restart", code, body)
	}
	code, body := get(t, h.readyz, "/readyz")
	if code != http.StatusServiceUnavailable || body["status"] != "not ready" {
		t.Fatalf("/readyz with the store down = %d %v, want 503 not ready", code, body)
	}
	if f := failed(body); len(f) != 1 || !strings.Contains(f["store"], "connection refused") {
		t.Fatalf("/readyz failed checks %v, want the store's alone, with its error", f)
	}
	// An orchestrator told to leave the store out finds the rest ready.
	if code, body := get(t, h.readyz, "/readyz?exclude=store"); code != http.StatusOK {
		t.Fatalf("/readyz?exclude=store = %d %v, want 200", code, body)
	}
}

// TestHealthWhenTheRelayIsWedged: a relay whose store call never returns
// (a driver that ignores its context) has stopped: /readyz says so after
// a couple of minutes, naming the relay, and /healthz fails once the loop
// has gone far longer than a round can take without finishing one, for a
// restart. Both stayed 200.
func TestHealthWhenTheRelayIsWedged(t *testing.T) {
	t.Parallel()
	called := make(chan struct{})
	hang := make(chan struct{})
	defer close(hang)
	var first sync.Once
	st := &faultyStore{Store: openTestSQLite(t), batch: func(ctx context.Context) error {
		if ctx.Value(readKey{}) != nil {
			return nil // /readyz's read of the store answers
		}
		first.Do(func() { close(called) })
		<-hang // ignores its context
		return errors.New("unreachable")
	}}
	var offset time.Duration
	_, h := runRelay(t, st, &offset)
	<-called
	h.checks = []check{{name: "store", fn: func(ctx context.Context) error {
		return storeCheck(st).fn(context.WithValue(ctx, readKey{}, true))
	}}}
	for _, c := range []struct {
		offset           time.Duration
		alive, ready     bool
		readyErrContains string
	}{
		{0, true, true, ""},
		{3 * time.Minute, true, false, "has not finished a round for 3m"},
		{11 * time.Minute, false, false, "has not finished a round for 11m"},
	} {
		offset = c.offset
		code, body := get(t, h.healthz, "/healthz")
		if alive := code == http.StatusOK; alive != c.alive {
			t.Errorf("%s after the relay's last round: /healthz = %d %v, want alive %v", c.offset, code, body, c.alive)
		}
		if !c.alive && (body["status"] != "wedged" || !strings.Contains(body["error"].(string), "claim loop")) {
			t.Errorf("/healthz of a wedged relay: %v, want it to say the claim loop is wedged", body)
		}
		code, body = get(t, h.readyz, "/readyz")
		if ready := code == http.StatusOK; ready != c.ready {
			t.Errorf("%s after the relay's last round: /readyz = %d %v, want ready %v", c.offset, code, body, c.ready)
		}
		if f := failed(body); !c.ready && (len(f) != 1 || !strings.Contains(f["relay"], c.readyErrContains)) {
			t.Errorf("%s: /readyz failed checks %v, want the relay's alone (%q)", c.offset, f, c.readyErrContains)
		}
	}
}

type readKey struct{}

// TestLastRoundIsOnTheMonotonicClock: /healthz measures the time since the
// relay's last round. The relay kept that time as Unix nanoseconds, which
// drops the monotonic reading, so the measure was the wall clock's: a wall
// clock stepped ten minutes forward (NTP after a VM resumed) failed
// /healthz on a healthy loop until its next round (an orchestrator
// restarts the process), and one stepped back hid a wedged loop for as
// long as the step. The time now keeps its monotonic reading, which
// time.Time's String shows as its m= field.
func TestLastRoundIsOnTheMonotonicClock(t *testing.T) {
	t.Parallel()
	calls := make(chan struct{}, 100)
	st := &faultyStore{Store: openTestSQLite(t), batch: func(context.Context) error {
		select {
		case calls <- struct{}{}:
		default:
		}
		return nil
	}}
	var offset time.Duration
	r, _ := runRelay(t, st, &offset)
	<-calls
	<-calls // the first round has finished
	if last := r.LastRound(); !strings.Contains(last.String(), " m=") {
		t.Fatalf("the relay's last round %s has no monotonic reading: its age is read on the wall clock", last)
	}
}
