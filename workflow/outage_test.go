package workflow_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfpostgres"
)

// The database goes away for 1.3 s (a restart, a failover: here a proxy
// between the store and PostgreSQL cuts every connection and refuses new
// ones) while a task runs and the run's lease falls due for renewal. The
// lease has two thirds of its time left, so nobody else can take the run:
// the renewal is tried again until the database answers, and the task
// goes on. The first failed renewal stopped the driver: the running
// attempt was cancelled (lost), the run released, and Run returned the
// renewal's error.
func TestBriefDatabaseOutageKeepsTheRunPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newOutageProxy(t)
	ws := openWorkflowPostgres(t, p.url, testenv.NewSchema(t, "wf_outage_"))
	// Renewals every second; the lease lapses 3 s after one.
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "A", LeaseDuration: 3 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	outage := func(ctx context.Context, _ *workflow.TaskContext) error {
		p.down()
		select { // the database is away past the renewal
		case <-time.After(1300 * time.Millisecond):
		case <-ctx.Done():
			p.up()
			return context.Cause(ctx)
		}
		p.up()
		select { // the work goes on after the outage
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	d, err := workflow.NewDAG("outage", nil, workflow.Task{ID: "a", Run: outage},
		workflow.Task{ID: "b", Upstream: []string{"a"}, Run: func(context.Context, *workflow.TaskContext) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(ctx, "outage", workflow.RunOptions{ID: "r-outage"})
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Run = %v", err)
	}
	if h := r.Task("a").History; len(h) != 1 || h[0].Outcome != "success" {
		t.Errorf("a's attempts: %+v; want one, a success", h)
	}
}

// outageProxy forwards TCP connections to PostgreSQL until down, which
// cuts them all and refuses new ones until up.
type outageProxy struct {
	url string
	mu  sync.Mutex
	cut bool
	cs  []net.Conn
}

func newOutageProxy(t *testing.T) *outageProxy {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u.Host = ln.Addr().String()
	p := &outageProxy{url: u.String()}
	t.Cleanup(p.down)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.cs = append(p.cs, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *outageProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

func (p *outageProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// openNamedPostgres opens a workflow store on a new PostgreSQL schema whose
// connections, and only they, carry the application name it returns.
func openNamedPostgres(t *testing.T, prefix string) (*wfpostgres.Store, string) {
	t.Helper()
	schema := testenv.NewSchema(t, prefix)
	app := "backstop_" + schema
	url := testenv.PostgresURL()
	if strings.Contains(url, "?") {
		url += "&application_name=" + app
	} else {
		url += "?application_name=" + app
	}
	return openWorkflowPostgres(t, url, schema), app
}

// openWorkflowPostgres opens a store through url on schema, migrated, and
// the workflow store on it, closed when the test ends.
func openWorkflowPostgres(t *testing.T, url, schema string) *wfpostgres.Store {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, store.Config{}, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ws, err := wfpostgres.New(ctx, st, wfpostgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// terminator returns a function that terminates the connections named app
// and returns how many it terminated.
func terminator(t *testing.T, app string) func() int {
	admin := testenv.PostgresAdmin(t)
	return func() int {
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid, 30000))
			FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
			t.Errorf("terminating the store's connections: %v", err)
		}
		return n
	}
}

// The database connection is lost (a restart, pg_terminate_backend) while
// OnTaskFailure runs for a task out of retries, so the renewal the driver
// makes after the callback fails. That says nothing of who holds the run:
// the task is dead-lettered and the run goes on and ends. The failed
// renewal was taken for the run's loss: the task was left failed without
// a dead letter ("the instance holding it does so", but none did), and
// the driver, its attempts' context cancelled, went on starting the next
// task, which was cancelled at once, recorded lost and started again, as
// fast as the database took it (648 attempts in 5 s), until Run's context
// ended.
func TestOutageAfterOnTaskFailureStillDeadLettersPostgres(t *testing.T) {
	t.Parallel()
	ws, app := openNamedPostgres(t, "wf_otf_")
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "A", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	terminate := terminator(t, app)
	killed := 0
	var bCalls atomic.Int32
	prop := &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream,
		OnTaskFailure: func(context.Context, *models.Task, *models.TaskInstance, error) error {
			killed += terminate()
			return nil
		}}
	d, err := workflow.NewDAG("otf", prop,
		workflow.Task{ID: "a", Run: func(context.Context, *workflow.TaskContext) error {
			return eh.Permanent(errors.New("a broke"))
		}},
		workflow.Task{ID: "b", Upstream: []string{"a"}, AllowFailure: []string{"a"},
			Run: func(ctx context.Context, _ *workflow.TaskContext) error {
				bCalls.Add(1)
				return ctx.Err()
			}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.Run(ctx, "otf", workflow.RunOptions{ID: "r-otf"})
	if !errors.Is(err, workflow.ErrRunFailed) || r == nil {
		t.Fatalf("Run = %v after %d connections terminated and %d calls of b; want the run failed", err, killed, bCalls.Load())
	}
	if killed == 0 {
		t.Fatal("no connection of the store was terminated")
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateSuccess})
	if n := bCalls.Load(); n != 1 {
		t.Errorf("b was called %d times, want once", n)
	}
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	if n, err := ws.DLQ().Count(context.Background()); err != nil || n != 1 {
		t.Errorf("dead letters: %d, %v; want 1", n, err)
	}
}

// The database goes away (a proxy cuts every connection and refuses new
// ones) while OnTaskFailure runs for a task out of retries, and comes back
// once the engine says it is trying a store call again: the failure's
// dead-letter add is tried again, the task is dead-lettered and the run
// ends. The add failed once and the task was left failed without its dead
// letter until a later resume of the run (which, ended, had none).
func TestOutageWhileDeadLetteringStillDeadLettersPostgres(t *testing.T) {
	t.Parallel()
	runThroughCutPostgres(t, "wf_dlqout_", false)
}

// The database goes away as a task fails for good, so that recording its
// failure finds it away, and comes back once the engine says it is trying
// a store call again: the failure is recorded, dead-lettered, and the run
// ends. The failed write stopped the run: Run returned the store's error,
// and the failure was recorded only when the run was resumed, the task's
// attempt then found lost and run again.
func TestOutageWhileRecordingAFailureKeepsTheRunPostgres(t *testing.T) {
	t.Parallel()
	runThroughCutPostgres(t, "wf_recout_", true)
}

// runThroughCutPostgres runs a DAG whose task a fails for good (b, its
// downstream, is then upstream_failed) on PostgreSQL through a proxy that
// cuts the connections as a returns (inTask) or in OnTaskFailure, and lets
// them through again once the engine logs that it tries a call again. It
// checks that the run ended failed, a ran once and was dead-lettered once.
func runThroughCutPostgres(t *testing.T, prefix string, inTask bool) {
	t.Helper()
	p := newOutageProxy(t)
	ws := openWorkflowPostgres(t, p.url, testenv.NewSchema(t, prefix))
	retrying := make(chan struct{})
	logger := slog.New(&signalHandler{msg: "store call failed for want of the database; trying it again while the run's lease holds",
		c: retrying})
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "A", LeaseDuration: 3 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	prop := &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream,
		OnTaskFailure: func(context.Context, *models.Task, *models.TaskInstance, error) error {
			if !inTask {
				p.down()
			}
			return nil
		}}
	d, err := workflow.NewDAG("cut", prop,
		workflow.Task{ID: "a", Run: func(context.Context, *workflow.TaskContext) error {
			calls.Add(1)
			if inTask {
				p.down()
			}
			return eh.Permanent(errors.New("a broke"))
		}},
		workflow.Task{ID: "b", Upstream: []string{"a"}, Run: func(context.Context, *workflow.TaskContext) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var r *workflow.Run
	go func() {
		defer close(done)
		r, err = e.Run(context.Background(), "cut", workflow.RunOptions{ID: "r-cut"})
	}()
	select {
	case <-retrying:
	case <-done:
	}
	p.up()
	<-done
	if !errors.Is(err, workflow.ErrRunFailed) || r == nil {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if n := calls.Load(); n != 1 {
		t.Errorf("a ran %d times, want once", n)
	}
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	if n, err := ws.DLQ().Count(context.Background()); err != nil || n != 1 {
		t.Errorf("dead letters: %d, %v; want 1", n, err)
	}
}

// signalHandler is a slog handler that closes c at the first record whose
// message is msg, and drops every record.
type signalHandler struct {
	msg  string
	c    chan struct{}
	once sync.Once
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.c) })
	}
	return nil
}

func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }
