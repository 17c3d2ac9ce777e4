package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"unicode/utf8"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/usercode"
	"github.com/backstophq/backstop/workflow/models"
)

// MaxErrorMessage is the most characters (runes) of an error message an
// entry keeps; AddFailedTask cuts longer messages.
const MaxErrorMessage = 2000

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithLogger sets the logger that records each dead letter (at ERROR, as
// "task dead-lettered" or "message dead-lettered") and each threshold
// crossing (at ERROR, "dead-letter threshold reached"). Nil, the default,
// means slog.Default().
func WithLogger(l *slog.Logger) ManagerOption {
	return func(m *Manager) {
		if l != nil {
			m.logger = l
		}
	}
}

// WithClassifier sets the classifier AddFailedTask uses to name a failure
// reason. Nil, the default, means errorhandling.NewErrorClassifier().
func WithClassifier(c *errorhandling.ErrorClassifier) ManagerOption {
	return func(m *Manager) {
		if c != nil {
			m.classifier = c
		}
	}
}

// Manager puts failures into a Queue and tells the application: it logs
// each dead letter, calls the OnEntryAdded callbacks, and calls the
// OnThresholdReached callbacks when the queue fills up.
//
// The threshold fires once per crossing. After an Add, the manager counts
// the queue: a count at or above the threshold fires the callbacks if the
// manager is armed, and disarms it; a count below re-arms it. A manager
// starts armed. Entries removed by Delete, Purge or PurgeBefore are only
// noticed by the next Add, so the callbacks fire again on the first Add
// that finds the queue back at the threshold after an Add found it below.
// Entries added to the queue directly, not through the manager, count but
// trigger nothing until the next Add through it.
//
// Callbacks run synchronously in the goroutine that called Add, after the
// entry is stored, in the order registered; they should be quick. A Manager
// is safe for concurrent use.
type Manager struct {
	queue      Queue
	threshold  int
	logger     *slog.Logger
	classifier *errorhandling.ErrorClassifier

	mu          sync.Mutex // guards the callbacks and armed; serialises the count check
	onAdded     []func(*Entry)
	onThreshold []func(int)
	armed       bool
}

// NewManager returns a manager adding to queue that calls the
// OnThresholdReached callbacks when queue holds threshold entries or more.
// A threshold of 0 or less never fires.
func NewManager(queue Queue, threshold int, opts ...ManagerOption) *Manager {
	m := &Manager{
		queue:      queue,
		threshold:  threshold,
		logger:     slog.Default(),
		classifier: errorhandling.NewErrorClassifier(),
		armed:      true,
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// OnEntryAdded registers fn to be called with each entry the manager adds,
// after it is stored (its ID is set). Each call adds a callback. A callback
// that panics or calls runtime.Goexit is logged at ERROR; the others are
// still called.
func (m *Manager) OnEntryAdded(fn func(entry *Entry)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onAdded = append(m.onAdded, fn)
}

// OnThresholdReached registers fn to be called with the queue's count when
// an Add finds the count at or above the threshold, once per crossing (see
// Manager). Each call adds a callback. A callback that panics or calls
// runtime.Goexit is logged at ERROR; the others are still called.
func (m *Manager) OnThresholdReached(fn func(count int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onThreshold = append(m.onThreshold, fn)
}

// Add stores entry in the queue (which fills an empty ID, Status and
// FailureTime in entry), logs it, calls the OnEntryAdded callbacks and
// checks the threshold. It returns the queue's error, in which case nothing
// else happens. A failure to count the queue afterwards is logged, not
// returned: the entry is stored, and a caller retrying would park it twice.
//
// An entry given an ID the queue holds already is not stored: the error
// matches ErrExists, and nothing else happens (the callbacks ran when
// that entry was added through a manager). An ID that names the failure
// (see FailedTaskEntry) thus parks it once however many callers add it.
// Queues that do not say ErrExists themselves are asked for the ID after
// a failed add.
func (m *Manager) Add(ctx context.Context, entry *Entry) error {
	var id string
	if entry != nil {
		id = entry.ID
	}
	if err := m.queue.Add(ctx, entry); err != nil {
		if id != "" && !errors.Is(err, ErrExists) {
			if _, getErr := m.queue.Get(ctx, id); getErr == nil {
				err = fmt.Errorf("%w: %q: %w", ErrExists, id, err)
			}
		}
		return err
	}
	m.Notify(ctx, entry)
	return nil
}

// Notify tells the manager of an entry that was put in its queue by
// someone else, such as a store that dead-letters a relay's message in
// the transaction that records its last failure (relay.Config.DeadLetters
// calls it): it logs the entry, calls the OnEntryAdded callbacks and
// checks the threshold, as Add does once it has stored an entry.
func (m *Manager) Notify(ctx context.Context, entry *Entry) {
	m.logAdded(ctx, entry)
	m.mu.Lock()
	added := m.onAdded
	m.mu.Unlock()
	for _, fn := range added {
		usercode.Run(ctx, m.logger, "an OnEntryAdded callback", " while dead-lettering", func() { fn(entry) }, slog.String("dlq_id", entry.ID))
	}
	m.checkThreshold(ctx)
}

// checkThreshold counts the queue and fires the threshold callbacks on a
// crossing. Counting under the lock keeps the counts the manager sees in
// the order they happened, so two concurrent Adds cannot both fire.
func (m *Manager) checkThreshold(ctx context.Context) {
	if m.threshold <= 0 {
		return
	}
	m.mu.Lock()
	n, err := m.queue.Count(ctx)
	fire := false
	if err == nil {
		above := n >= m.threshold
		fire = above && m.armed
		m.armed = !above
	}
	callbacks := m.onThreshold
	m.mu.Unlock()
	if err != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "dead-letter queue count failed",
			slog.String("error", err.Error()))
		return
	}
	if !fire {
		return
	}
	m.logger.LogAttrs(ctx, slog.LevelError, "dead-letter threshold reached",
		slog.Int("count", n), slog.Int("threshold", m.threshold))
	for _, fn := range callbacks {
		usercode.Run(ctx, m.logger, "an OnThresholdReached callback", " while dead-lettering", func() { fn(n) }, slog.Int("count", n))
	}
}

// AddFailedTask dead-letters a workflow task instance that failed for good,
// with err its last error (nil means ti.Error). The entry carries the
// instance's IDs (DAGID from dag when the instance has none), Attempts from
// ti.Attempt, LastAttemptTime from ti.EndedAt (and FirstFailureTime too for
// a first attempt), the error message cut to MaxErrorMessage runes, the
// error's fingerprint, and a failure reason: the one attached with
// errorhandling.WithReason, else the classifier's, where a reason the
// classifier cannot name (ReasonUnknown) becomes ReasonHandlerException,
// since a task's error comes from its handler. Metadata records the
// classification ("error_class", "error_code", "classified_by") and
// "dag_name".
func (m *Manager) AddFailedTask(ctx context.Context, ti *models.TaskInstance, dag *models.DAG, err error) error {
	e, buildErr := m.FailedTaskEntry(ti, dag, err)
	if buildErr != nil {
		return buildErr
	}
	if addErr := m.Add(ctx, e); addErr != nil {
		return fmt.Errorf("dlq: add failed task %q: %w", ti.ID, addErr)
	}
	return nil
}

// FailedTaskEntry returns the entry AddFailedTask adds for ti, without
// adding it. A caller that may dead-letter the same failure twice (two
// processes that each believe they own the task, a retry after an
// ambiguous error) gives the entry an ID derived from the failure before
// it calls Add: the second Add then fails with ErrExists, and the queue
// keeps one entry.
func (m *Manager) FailedTaskEntry(ti *models.TaskInstance, dag *models.DAG, err error) (*Entry, error) {
	if ti == nil {
		return nil, errors.New("dlq: add failed task: nil task instance")
	}
	if err == nil && ti.Error != "" {
		err = errors.New(ti.Error)
	}
	e := &Entry{
		TaskInstanceID:  ti.ID,
		TaskID:          ti.TaskID,
		DAGRunID:        ti.DAGRunID,
		DAGID:           ti.DAGID,
		Attempts:        ti.Attempt,
		LastAttemptTime: ti.EndedAt,
		Metadata:        map[string]interface{}{},
	}
	if e.DAGID == "" && dag != nil {
		e.DAGID = dag.ID
	}
	if dag != nil && dag.Name != "" {
		e.Metadata["dag_name"] = dag.Name
	}
	if ti.Attempt <= 1 {
		e.FirstFailureTime = ti.EndedAt
	}
	e.Reason = errorhandling.ReasonHandlerException
	if err != nil {
		e.ErrorMessage = truncate(err.Error(), MaxErrorMessage)
		e.Fingerprint = errorhandling.Fingerprint(err)
		v := m.classify(err)
		if _, attached := errorhandling.ReasonOf(err); attached || v.Reason != errorhandling.ReasonUnknown {
			e.Reason = v.Reason
		}
		e.Metadata["error_class"] = v.Class.String()
		if v.Code != "" {
			e.Metadata["error_code"] = v.Code
		}
		if v.Rule != "" {
			e.Metadata["classified_by"] = v.Rule
		}
	}
	e.FailureReason = e.Reason.String()
	return e, nil
}

// classify is the classifier's verdict on err. A rule that panics or
// calls runtime.Goexit (usercode.Run) must not take the process or the caller's
// goroutine down while a failure is being dead-lettered: the verdict is
// then unknown (the entry keeps reason HandlerException), and what
// happened is logged at ERROR.
func (m *Manager) classify(err error) (v errorhandling.Classification) {
	if usercode.Run(context.Background(), m.logger, "the error classifier", " while dead-lettering", func() { v = m.classifier.Classify(err) },
		slog.Any("error", err)) { // its message read only if the fault is logged
		return v
	}
	return errorhandling.Classification{Class: errorhandling.ClassUnknown, Rule: "panic"}
}

// logAdded writes the ops log record of a dead letter.
func (m *Manager) logAdded(ctx context.Context, e *Entry) {
	attrs := []slog.Attr{slog.String("dlq_id", e.ID)}
	msg := "message dead-lettered"
	if e.TaskInstanceID != "" || e.TaskID != "" {
		msg = "task dead-lettered"
		attrs = append(attrs,
			slog.String("dag_id", e.DAGID),
			slog.String("dag_run_id", e.DAGRunID),
			slog.String("task_id", e.TaskID),
			slog.String("task_instance_id", e.TaskInstanceID))
	} else {
		attrs = append(attrs,
			slog.String("message_id", e.MessageID),
			slog.String("destination", e.Destination),
			slog.String("stream", e.Stream),
			slog.Int64("seq", e.Seq))
	}
	attrs = append(attrs,
		slog.Int("attempts", e.Attempts),
		slog.String("reason", e.FailureReason),
		slog.String("fingerprint", e.Fingerprint),
		slog.String("error", e.ErrorMessage))
	m.logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

// truncate returns s cut to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
