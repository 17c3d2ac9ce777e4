package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dashboard"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport/webhook"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

const (
	operateToken = "operate-token-0123456789"
	readToken    = "read-token-0123456789ab"
)

// storeConfig gives quick retries so that the tests take seconds, and
// keeps delivered messages so that the messages page has some to show.
func storeConfig() store.Config {
	return store.Config{
		DefaultPolicy: store.Policy{Strategy: fastRetry, MaxAttempts: 3, Ordering: outbox.OrderingStrict},
		Retention:     time.Hour,
	}
}

var fastRetry = retry.NewExponentialBackoff(50*time.Millisecond, 200*time.Millisecond, false)

func openSQLite(t *testing.T) store.Store {
	// A long lock wait: under -race on a loaded machine the relay's claims
	// can hold the writer for a while.
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), storeConfig(), sqlite.WithLockWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// schemas are the schemas of the PostgreSQL stores openPostgres opened.
var schemas sync.Map // *postgres.Store -> string

func openPostgres(t *testing.T) store.Store {
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "dash_")
	st, err := postgres.Open(context.Background(), testenv.PostgresURL(), storeConfig(), postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	schemas.Store(st, schema)
	return st
}

// workflows opens the workflow store on st's database, runs the etl DAG
// there to its end (etl-1, a success) and starts another run that nobody
// drives (etl-2, its tasks pending). The API it returns has no DAG
// definitions, as backstop serve's has none. (No task fails: a failed
// task's dead letter would join the fixture's six.)
func workflows(t *testing.T, st store.Store) *admin.Workflows {
	t.Helper()
	ctx := context.Background()
	out := &admin.Workflows{}
	switch s := st.(type) {
	case *sqlite.Store:
		ws, err := wfsqlite.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		out.Store, out.List = ws, admin.SQLiteRuns(s)
	case *postgres.Store:
		schema, _ := schemas.Load(s)
		ws, err := wfpostgres.New(ctx, s, wfpostgres.WithSchema(schema.(string)))
		if err != nil {
			t.Fatal(err)
		}
		out.Store, out.List = ws, admin.PostgresRuns(s, schema.(string))
	default:
		t.Fatalf("no workflow store for %T", st)
	}
	ok := func(context.Context, *workflow.TaskContext) error { return nil }
	d, err := workflow.NewDAG("etl", &errorhandling.PropagationConfig{Policy: errorhandling.PropagationPolicySkipDownstream},
		workflow.Task{ID: "extract", Run: ok},
		workflow.Task{ID: "validate", Upstream: []string{"extract"}, Run: ok},
		workflow.Task{ID: "load", Upstream: []string{"validate"}, Run: ok},
		workflow.Task{ID: "audit", Upstream: []string{"extract"}, Run: ok},
	)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := workflow.NewEngine(out.Store, workflow.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(d); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Run(ctx, "etl", workflow.RunOptions{ID: "etl-1"}); err != nil {
		t.Fatalf("etl-1: %v", err)
	}
	if _, err := eng.Start(ctx, "etl", workflow.RunOptions{ID: "etl-2"}); err != nil {
		t.Fatalf("etl-2: %v", err)
	}
	// A run named "..": a browser removes such a path segment, even
	// written %2E, so the page asks for it by query.
	if _, err := eng.Start(ctx, "etl", workflow.RunOptions{ID: ".."}); err != nil {
		t.Fatalf("run ..: %v", err)
	}
	// A run and tasks named as an application could name them: markup,
	// URL syntax, control characters and a bidi override.
	odd, err := workflow.NewDAG("odd<b>", nil,
		workflow.Task{ID: hostileTask, Run: ok},
		workflow.Task{ID: "a\tb/c?d#e", Upstream: []string{hostileTask}, Run: ok})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(odd); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Start(ctx, "odd<b>", workflow.RunOptions{ID: hostileRun}); err != nil {
		t.Fatalf("hostile run: %v", err)
	}
	return out
}

// The hostile run's and task's IDs: each would set window.pwned if the
// dashboard made markup of it.
const (
	hostileRun  = "odd/1?x=%41#y<script>window.pwned=1</script>\x1b[2J\u202e"
	hostileTask = "<img src=x onerror=\"window.pwned=2\">"
)

// receiver is the destination: a webhook endpoint that refuses some
// message types with 422 (the message's fault: dead-lettered at once)
// until told to accept everything, and reports each message it accepts.
type receiver struct {
	srv    *httptest.Server
	accept atomic.Bool
	mu     sync.Mutex
	got    map[string]bool
	signal chan struct{} // closed and replaced on every accepted message
}

// refusal is how the receiver refuses a type of message: a 4xx (a
// permanent fault) and a body whose number differs from message to
// message. The webhook transport quotes the body in its error, and the
// fingerprint ignores quoted text, so the status tells the groups apart.
type refusal struct {
	status int
	body   string
}

var refusals = map[string]refusal{
	"order.refused": {http.StatusUnprocessableEntity, "unknown fulfilment step %d"},
	"order.invalid": {http.StatusBadRequest, "amount must be positive, got -%d"},
	"order.stuck":   {http.StatusConflict, "customer account %d is locked"},
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: map[string]bool{}, signal: make(chan struct{})}
	var n atomic.Int64
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if re, bad := refusals[req.Header.Get(webhook.HeaderType)]; bad && !r.accept.Load() {
			w.WriteHeader(re.status)
			fmt.Fprintf(w, re.body, 100+n.Add(1))
			return
		}
		r.mu.Lock()
		r.got[req.Header.Get(webhook.HeaderMessageID)] = true
		close(r.signal)
		r.signal = make(chan struct{})
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// waitFor waits until every id has arrived.
func (r *receiver) waitFor(t *testing.T, what string, ids ...string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		r.mu.Lock()
		missing := 0
		for _, id := range ids {
			if !r.got[id] {
				missing++
			}
		}
		ch := r.signal
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: %d of %d messages never arrived at the destination", what, missing, len(ids))
		}
	}
}

func (r *receiver) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

// fixture is a server as serve builds it (the admin API under /v1, the
// dashboard at /) over a store whose relay delivers to the receiver, with
// dead letters of three causes and a stream held behind one of them.
type fixture struct {
	gate gate
	// leasedReads counts the requests for a page of leased messages: the
	// overview must not make them when the breakers report in_flight.
	leasedReads atomic.Int64
	st          store.Store
	hook        *receiver
	url         string
	// refused are the entries of the largest group (unknown fulfilment
	// step), invalid those of the second, stuck the head of the blocked
	// stream and held the message behind it.
	refused, invalid []*dlq.Entry
	stuck            *dlq.Entry
	held             string
	// deadLettered receives a value for each message the relay
	// dead-letters.
	deadLettered chan struct{}
	// binary is the entry of the message with a binary payload, hostile
	// the one whose payload and headers hold markup (both of invalid).
	binary, hostile *dlq.Entry
}

func newFixture(t *testing.T, st store.Store) *fixture {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{st: st, hook: newReceiver(t), deadLettered: make(chan struct{}, 64)}
	binID := f.write(t)
	tr, err := webhook.New(webhook.Config{URL: f.hook.srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := relay.New(st, relay.Config{
		Destinations:    map[string]relay.Destination{"orders": {Transport: tr, Timeout: 5 * time.Second}},
		Workers:         4,
		PollInterval:    20 * time.Millisecond,
		MaxPollInterval: 100 * time.Millisecond,
		Tracker:         tracker.RegistryConfig{Config: tracker.Config{Strategy: fastRetry}},
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:         prometheus.NewRegistry(),
		OnDeadLetter: func(relay.Failure) {
			select {
			case f.deadLettered <- struct{}{}:
			default: // nobody counts any more: never block the relay
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
	})

	api, err := admin.New(admin.Config{
		Store:     st,
		Workflows: workflows(t, st),
		Tokens: []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate},
			{Name: "wallboard", Secret: readToken, Role: admin.RoleRead}},
		Breakers: admin.RelayBreakers(rl),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", f.gate.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages" && r.URL.Query().Get("state") == "leased" {
			f.leasedReads.Add(1)
		}
		api.Handler().ServeHTTP(w, r)
	})))
	mux.Handle("/", dashboard.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	f.seed(t, binID)
	return f
}

func (f *fixture) enqueue(t *testing.T, msgs ...*outbox.Message) {
	t.Helper()
	if err := f.st.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func msg(typ, stream string, payload string) *outbox.Message {
	return &outbox.Message{Destination: "orders", Type: typ, Stream: stream, Payload: []byte(payload),
		Headers: map[string]string{"X-Tenant": "acme"}}
}

// write writes the messages of the fixture (before the relay starts, so
// that no claim competes with them) and returns the id of the one with a
// binary payload.
func (f *fixture) write(t *testing.T) string {
	for i := range 3 {
		f.enqueue(t, msg("order.refused", fmt.Sprintf("order-%d", i+1), fmt.Sprintf(`{"order": %d, "step": "ship"}`, i+1)))
	}
	// Markup, a NUL and a right-to-left override in the payload and a
	// header: the pages must show them as text.
	hostile := msg("order.invalid", "order-10", `{"order": 10, "amount": -5, "note": "<img src=x onerror=alert(1)><script>alert(2)</script>\u0000\u202e"}`)
	hostile.Headers["X-Note"] = "<b>bold</b>"
	f.enqueue(t, hostile)
	bin := msg("order.invalid", "order-11", "")
	bin.Payload = []byte{0, 1, 2, 0xff, 'b', 'i', 'n', '\n'}
	f.enqueue(t, bin)
	head, behind := msg("order.stuck", "customer-7", `{"customer": 7}`), msg("order.created", "customer-7", `{"customer": 7, "n": 2}`)
	f.enqueue(t, head, behind)
	f.held = behind.ID.String()
	return bin.ID.String()
}

// seed waits for the dead letters of the messages write wrote, then lets
// the receiver accept everything.
func (f *fixture) seed(t *testing.T, binID string) {
	ctx := context.Background()
	timeout := time.After(60 * time.Second)
	for n := range 6 {
		select {
		case <-f.deadLettered:
		case <-timeout:
			t.Fatalf("%d dead letters after 60 s, want 6", n)
		}
	}
	es, err := f.st.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		switch e.Type {
		case "order.refused":
			f.refused = append(f.refused, e)
		case "order.invalid":
			f.invalid = append(f.invalid, e)
			if e.MessageID == binID {
				f.binary = e
			} else {
				f.hostile = e
			}
		case "order.stuck":
			f.stuck = e
		}
	}
	if len(es) != 6 || len(f.refused) != 3 || len(f.invalid) != 2 || f.stuck == nil || f.binary == nil || f.hostile == nil {
		t.Fatalf("dead letters: %d refused, %d invalid, stuck %v", len(f.refused), len(f.invalid), f.stuck != nil)
	}
	if f.refused[0].Fingerprint != f.refused[2].Fingerprint || f.refused[0].Fingerprint == f.invalid[0].Fingerprint {
		t.Fatalf("fingerprints do not group the causes: %q %q %q (%s; %s)", f.refused[0].Fingerprint, f.refused[2].Fingerprint, f.invalid[0].Fingerprint, f.refused[0].ErrorMessage, f.invalid[0].ErrorMessage)
	}
	ss, err := f.st.StreamStatus(ctx, "orders", "customer-7")
	if err != nil || !ss.Blocked {
		t.Fatalf("stream customer-7: %+v %v, want blocked", ss, err)
	}
	f.hook.accept.Store(true)
}

// trickle writes deliverable messages on a ticker, so that the overview's
// rates move, until the returned func is called.
func (f *fixture) trickle(t *testing.T) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var batch []*outbox.Message
			for j := range 1 + i%5 {
				batch = append(batch, msg("order.created", fmt.Sprintf("trickle-%d", j), fmt.Sprintf(`{"n": %d}`, i)))
			}
			if err := f.st.Enqueue(context.Background(), batch...); err != nil {
				t.Logf("trickle: %v", err) // the rates shown are what matters, not this batch
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-finished }) }
	t.Cleanup(stop)
	return stop
}

// gate holds the API's answer to one path on demand, so that a test can
// move on in the dashboard while a page's request is still out.
type gate struct {
	mu      sync.Mutex
	path    string        // the path held; "" holds nothing
	held    chan struct{} // closed when a request to path arrives
	release chan struct{} // closed by the test to let it through
	done    chan struct{} // closed once its answer is written
}

// hold arms g for the next request to path (with its query, if it has
// one).
func (g *gate) hold(path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.path, g.held, g.release, g.done = path, make(chan struct{}), make(chan struct{}), make(chan struct{})
}

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		armed := g.path != "" && (r.URL.Path == g.path || r.URL.RequestURI() == g.path)
		var held, release, done chan struct{}
		if armed {
			g.path = ""
			held, release, done = g.held, g.release, g.done
		}
		g.mu.Unlock()
		if !armed {
			next.ServeHTTP(w, r)
			return
		}
		close(held)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		next.ServeHTTP(w, r)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		close(done)
	})
}
