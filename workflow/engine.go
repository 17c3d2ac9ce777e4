package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/usercode"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Engine runs DAGs durably. Runs and their tasks' states are kept in a
// wfstore.Store (wfsqlite, wfpostgres), so that a run interrupted by a crash
// resumes where it was, on restart or on another instance, without running
// again a task that succeeded. An Engine is safe for concurrent use; DAGs
// must be registered before their runs are started or resumed.
type Engine struct {
	st   wfstore.Store
	cfg  Config
	log  *slog.Logger
	dlq  dlq.Operator
	dlqm *dlq.Manager
	sem  chan struct{} // one token per running attempt

	mu     sync.Mutex
	dags   map[string]*DAG
	active map[string]bool // runs driven by this engine now
	// abandoned counts, per run, the attempts a driver abandoned that have
	// not returned yet (driver.abort): the run is not driven again by this
	// engine until they have, so that a task never runs twice at once here.
	abandoned map[string]int
	// settled holds the replayed dead-letter entries ReplayMarked found it
	// will never act on in this engine's life (awaitsReplay): it does not
	// load their runs again on every pass.
	settled map[string]bool
}

// NewEngine returns an engine keeping its runs in st. cfg has its defaults
// applied; a bad field is named in the error.
func NewEngine(st wfstore.Store, cfg Config) (*Engine, error) {
	if st == nil {
		return nil, errors.New("workflow: nil store")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{st: st, cfg: cfg, log: cfg.Logger.With(slog.String("instance_id", cfg.InstanceID)),
		dlq: cfg.DLQ, dlqm: cfg.DLQManager, sem: make(chan struct{}, cfg.MaxConcurrentTasks),
		dags: map[string]*DAG{}, active: map[string]bool{}, abandoned: map[string]int{}, settled: map[string]bool{}}
	if e.dlq == nil {
		e.dlq = st.DLQ()
	}
	if e.dlqm == nil {
		e.dlqm = dlq.NewManager(e.dlq, 0, dlq.WithLogger(cfg.Logger), dlq.WithClassifier(cfg.Classifier))
	}
	return e, nil
}

// InstanceID returns the ID this engine holds runs under.
func (e *Engine) InstanceID() string { return e.cfg.InstanceID }

// DeadLetters returns the manager that dead-letters failed tasks, to
// register alert callbacks on (OnEntryAdded, OnThresholdReached).
func (e *Engine) DeadLetters() *dlq.Manager { return e.dlqm }

// Register makes DAGs known to the engine, so their runs can be started and
// resumed. Registering a DAG again with the same shape replaces it (new
// functions, retries, timeouts); a different DAG under a registered ID is an
// error.
func (e *Engine) Register(dags ...*DAG) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// The DAGs of this call count as registered in turn: two shapes of
	// one ID in one call were both taken, the second replacing the first.
	seen := make(map[string]*DAG, len(dags))
	for _, d := range dags {
		if d == nil {
			return errors.New("workflow: Register: nil DAG")
		}
		if old, ok := seen[d.id]; ok && old.hash != d.hash {
			return fmt.Errorf("workflow: Register: DAG %s is given twice, with other tasks, edges or policy", d.id)
		}
		if old, ok := e.dags[d.id]; ok && old.hash != d.hash {
			return fmt.Errorf("workflow: Register: DAG %s is registered with other tasks, edges or policy", d.id)
		}
		seen[d.id] = d
	}
	for _, d := range dags {
		e.dags[d.id] = d
	}
	return nil
}

func (e *Engine) dag(id string) (*DAG, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.dags[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDAG, id)
	}
	return d, nil
}

// RunOptions are the choices of one run.
type RunOptions struct {
	// ID names the run. Empty means a new UUIDv7. Giving an ID makes
	// starting idempotent: Run with the ID of a run that exists resumes
	// it, or reports it when it has ended, instead of starting another.
	// Run IDs are shared by every DAG: the ID of another DAG's run is
	// ErrRunOfAnotherDAG.
	ID string
	// Input is stored with the run, as JSON, for its tasks to read with
	// TaskContext.Input. Nil means none.
	Input any
}

// Start stores a new run of the DAG and returns its ID without running
// it: an instance calling Work (this one or another sharing the database)
// picks it up. With the ID of an existing run it returns that ID and
// changes nothing.
func (e *Engine) Start(ctx context.Context, dagID string, opts RunOptions) (string, error) {
	id, err := e.create(ctx, dagID, opts, "")
	if errors.Is(err, wfstore.ErrRunExists) {
		return id, e.sameDAG(ctx, id, dagID)
	}
	return id, err
}

// sameDAG reports, for a run that exists already, whether it is a run of
// dagID: run IDs are global, and the ID of another DAG's run must not
// pass for this one (Run reported the other run's success, and this
// DAG's tasks never ran).
func (e *Engine) sameDAG(ctx context.Context, runID, dagID string) error {
	snap, err := e.st.Load(ctx, runID)
	if err != nil {
		return fmt.Errorf("workflow: run %q: %w", runID, err)
	}
	if snap.Run.DAGID != dagID {
		return fmt.Errorf("%w: %q is a run of DAG %q, not of %q", ErrRunOfAnotherDAG, runID, snap.Run.DAGID, dagID)
	}
	return nil
}

// Run starts a run of the DAG and drives it until it ends, then returns
// it. When the run ends failed the error is a *RunError (matching
// ErrRunFailed) and the *Run is returned too; a partial_success run
// returns no error. If opts.ID names an existing run, Run resumes it (or
// returns it as it ended). If ctx ends first, running attempts are
// cancelled and recorded as interrupted (not counted as failures), the
// run is released for another instance, and ctx's error is returned. A
// task function that ignores its context and has not returned 5 s (on
// Config.Clock) after the cancellation is abandoned, logged at WARN: the
// run is then not released but left to its lease, so that another
// instance runs the task again only once the lease lapses.
func (e *Engine) Run(ctx context.Context, dagID string, opts RunOptions) (*Run, error) {
	id, err := e.create(ctx, dagID, opts, e.cfg.InstanceID)
	if errors.Is(err, wfstore.ErrRunExists) {
		if err := e.sameDAG(ctx, id, dagID); err != nil {
			return nil, err
		}
		return e.Resume(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	d, err := e.dag(dagID)
	if err != nil {
		return nil, err
	}
	return e.drive(ctx, d, id)
}

// create stores a new run, held by owner when not empty.
func (e *Engine) create(ctx context.Context, dagID string, opts RunOptions, owner string) (string, error) {
	d, err := e.dag(dagID)
	if err != nil {
		return "", err
	}
	id := opts.ID
	if err := wfstore.CheckID(id); err != nil {
		return "", fmt.Errorf("%w: %q %v", ErrInvalidRunID, id, err)
	}
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("workflow: new run ID: %w", err)
		}
		id = u.String()
	}
	var input []byte
	if opts.Input != nil {
		if input, err = json.Marshal(opts.Input); err != nil {
			return "", fmt.Errorf("workflow: run input: %w", err)
		}
	}
	run := &wfstore.Run{ID: id, DAGID: d.id, DAGHash: d.hash, Input: input, Upstream: d.edges()}
	l := e.lease()
	l.Owner = owner
	if err := e.st.CreateRun(ctx, run, d.TaskIDs(), l); err != nil {
		return id, err
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "run started", slog.String("run_id", id), slog.String("dag_id", d.id))
	return id, nil
}

// Resume takes over a run that has not ended and drives it until it ends,
// as Run does. Attempts another instance left running (it crashed) are
// recorded as lost, not failed, and run again. It fails with
// wfstore.ErrLeased while another live instance holds the run, and with
// ErrRunActive while this engine drives it. A run that has ended is
// returned as it is (with a *RunError if it failed).
func (e *Engine) Resume(ctx context.Context, runID string) (*Run, error) {
	snap, err := e.st.Load(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("workflow: resume: %w", err)
	}
	d, err := e.dag(snap.Run.DAGID)
	if err != nil {
		return nil, err
	}
	if snap.Run.State.Terminal() {
		return e.report(d, snap)
	}
	return e.drive(ctx, d, runID)
}

// Get returns the run as stored now, whichever instance drives it. It
// does not need the DAG to be registered (tasks are then listed by ID).
func (e *Engine) Get(ctx context.Context, runID string) (*Run, error) {
	snap, err := e.st.Load(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("workflow: get run: %w", err)
	}
	d, _ := e.dag(snap.Run.DAGID)
	return newRun(d, snap, e.cfg.Clock.Now()), nil
}

// report returns the run and, when it failed, its *RunError.
func (e *Engine) report(d *DAG, snap *wfstore.Snapshot) (*Run, error) {
	r := newRun(d, snap, e.cfg.Clock.Now())
	return r, r.Err()
}

// lease returns this instance's lease at the clock's now.
func (e *Engine) lease() wfstore.Lease {
	return wfstore.Lease{Owner: e.cfg.InstanceID, Now: e.cfg.Clock.Now(), TTL: e.cfg.LeaseDuration}
}

// enter marks a run as driven here, or reports that it is already.
func (e *Engine) enter(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.active[runID] || e.abandoned[runID] > 0 {
		return false
	}
	e.active[runID] = true
	return true
}

func (e *Engine) leave(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.active, runID)
}

// awaitAbandoned keeps runID from being driven by this engine until the n
// attempts its driver abandoned have sent their results, which it drains.
// Resume took the run again at once (its own lease), and the task ran a
// second time beside the abandoned attempt.
func (e *Engine) awaitAbandoned(runID string, n int, results <-chan result) {
	e.mu.Lock()
	e.abandoned[runID] += n
	e.mu.Unlock()
	go func() {
		for range n {
			<-results
		}
		e.mu.Lock()
		if e.abandoned[runID] -= n; e.abandoned[runID] <= 0 {
			delete(e.abandoned, runID)
		}
		e.mu.Unlock()
		e.log.LogAttrs(context.Background(), slog.LevelInfo, "abandoned attempts returned; the run may be driven again",
			slog.String("run_id", runID), slog.Int("attempts", n))
	}()
}

// logPanic logs at ERROR, with msg, the panic v of user code the engine
// recovered from, and the stack it panicked on (call it from the deferred
// function that recovered).
func logPanic(ctx context.Context, log *slog.Logger, msg string, v any, attrs ...slog.Attr) {
	log.LogAttrs(ctx, slog.LevelError, msg, append(attrs,
		slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))...)
}

// emit calls OnEvent (usercode.Run: one that panics or calls runtime.Goexit is
// logged, and the driver goes on).
func (e *Engine) emit(ev Event) {
	if e.cfg.OnEvent == nil {
		return
	}
	usercode.Run(context.Background(), e.log, "OnEvent", "", func() { e.cfg.OnEvent(ev) },
		slog.String("run_id", ev.RunID), slog.String("task_id", ev.TaskID))
}

// classify is the classifier's verdict on a task's error. A rule that
// panics or calls runtime.Goexit (usercode.Run) must not take the process or the
// driver down (and again on every resume of the run): the error is then
// taken as transient, so the task is retried as its retries allow, and
// what happened is logged at ERROR.
func (e *Engine) classify(err error) (v errorhandling.Classification) {
	if usercode.Run(context.Background(), e.log, "the error classifier", "; the error is taken as transient",
		// slog.Any reads err's message only if the fault is logged.
		func() { v = e.cfg.Classifier.Classify(err) }, slog.Any("error", err)) {
		return v
	}
	return errorhandling.Classification{Class: errorhandling.ClassTransient, Retryable: true,
		Reason: errorhandling.ReasonHandlerException, Code: "classifier_panic", Rule: "panic"}
}
