package workflow

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
)

// Config configures an Engine. The zero value is usable: every field has a
// default, given in its comment.
type Config struct {
	// InstanceID names this engine instance in leases and attempt
	// history. It must be unique among the live instances sharing a
	// database, and UTF-8 without NUL (what both stores keep). Empty
	// means hostname-pid-random.
	InstanceID string
	// MaxConcurrentTasks bounds how many task attempts run at once in
	// this engine, across all its runs. 0 means 8; negative is an error.
	MaxConcurrentTasks int
	// LeaseDuration is how long an instance's hold on a run lasts without
	// renewal; it renews every third of it. Another instance may take the
	// run over once it lapses. A lease expiring further ahead than twice
	// the LeaseDuration of the instance that looks for abandoned runs was
	// taken before the clock was stepped back and is moved to one lease
	// from now: instances sharing a store should not differ in it by more
	// than twice. 0 means 30 s; a value below MinLeaseDuration is an
	// error.
	LeaseDuration time.Duration
	// PollInterval is how often Work looks for abandoned runs and for
	// workflow dead letters replayed through the dead-letter queue. 0
	// means half of LeaseDuration; a value below MinPollInterval is an
	// error.
	PollInterval time.Duration
	// OlderShapeGrace is how long Work leaves a run of another shape of
	// a DAG registered here (created before a deploy added, removed or
	// renamed a task, or changed its edges or policy) for an instance
	// that registers the run's shape, once nobody drives it: during a
	// rolling deploy the instances not yet updated take such runs over.
	// Past it Work ends the run failed, its attempts left running
	// recorded lost and its remaining tasks skipped, with a reason that
	// names the change (shown by Engine.Get, the admin API and the
	// dashboard). 0 means 10 minutes; negative means never: such runs
	// then stay running until an instance with their shape takes them.
	OlderShapeGrace time.Duration
	// Clock times retries, timeouts and leases. Nil means clock.Real.
	Clock clock.Clock
	// Logger receives the engine's records (keys run_id, dag_id, task_id,
	// attempt, state, reason, error, instance_id, dlq_id). Nil means
	// slog.Default().
	Logger *slog.Logger
	// Classifier decides which task errors are permanent (not retried).
	// Nil means errorhandling.NewErrorClassifier(). Unknown errors are
	// retried, as by retry.Executor.
	Classifier *errorhandling.ErrorClassifier
	// DLQ is the dead-letter queue failed tasks go to and ReplayTask reads.
	// Nil means the workflow store's own (Store.DLQ()).
	DLQ dlq.Operator
	// DLQManager adds failed tasks to the queue (FailedTaskEntry, then
	// Add, under an ID derived from the failed attempt so that a failure
	// is parked once) and runs its alert callbacks. It must add to DLQ.
	// Nil means a manager on DLQ without threshold, logging to Logger.
	DLQManager *dlq.Manager
	// OnEvent, when set, is called after every change of a task's or a
	// run's state is stored, synchronously and possibly from several
	// goroutines; it must be quick and safe for concurrent use.
	OnEvent func(Event)
}

// Event is a change of a task's or a run's state, already stored.
type Event struct {
	// Time is when it happened, by the engine's clock.
	Time time.Time
	// RunID and DAGID identify the run.
	RunID, DAGID string
	// TaskID is the task that changed; empty for a change of the run.
	TaskID string
	// Attempt is the task's attempt number.
	Attempt int
	// TaskState is the task's new state; empty for a run event.
	TaskState models.TaskState
	// RunState is the run's new state; empty for a task event.
	RunState models.RunState
	// Reason says why, in words.
	Reason string
	// NextAttemptAt is when an up_for_retry task is due.
	NextAttemptAt time.Time
}

// The shortest LeaseDuration and PollInterval a Config takes. A duration
// given as a bare number (LeaseDuration: 30, meant as seconds) is
// nanoseconds: the lease was renewed in a loop that never waited, lapsed
// before another instance could read it (which then took the run over,
// running its tasks a second time at once), and Work looked for abandoned
// runs in a loop as tight, starting a goroutine on every pass.
const (
	MinLeaseDuration = time.Second
	MinPollInterval  = 10 * time.Millisecond
)

// withDefaults returns c with its defaults applied, or an error naming the
// bad field.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.MaxConcurrentTasks < 0:
		return c, fmt.Errorf("workflow: Config.MaxConcurrentTasks must not be negative, got %d", c.MaxConcurrentTasks)
	case c.LeaseDuration < 0:
		return c, fmt.Errorf("workflow: Config.LeaseDuration must not be negative, got %s", c.LeaseDuration)
	case c.LeaseDuration != 0 && c.LeaseDuration < MinLeaseDuration:
		return c, fmt.Errorf("workflow: Config.LeaseDuration must be 0 (30 s) or at least %s, got %s", MinLeaseDuration, c.LeaseDuration)
	case c.PollInterval < 0:
		return c, fmt.Errorf("workflow: Config.PollInterval must not be negative, got %s", c.PollInterval)
	case c.PollInterval != 0 && c.PollInterval < MinPollInterval:
		return c, fmt.Errorf("workflow: Config.PollInterval must be 0 (half the lease) or at least %s, got %s", MinPollInterval, c.PollInterval)
	}
	if !utf8.ValidString(c.InstanceID) || strings.IndexByte(c.InstanceID, 0) >= 0 {
		// It is every lease's and attempt's owner: PostgreSQL keeps no
		// such text, and every run failed there with an encoding error
		// that named neither the ID nor the configuration.
		return c, fmt.Errorf("workflow: Config.InstanceID must be UTF-8 without NUL, as both stores keep it, got %q", c.InstanceID)
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if c.MaxConcurrentTasks == 0 {
		c.MaxConcurrentTasks = 8
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = c.LeaseDuration / 2
	}
	if c.OlderShapeGrace == 0 {
		c.OlderShapeGrace = defaultOlderShapeGrace
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Classifier == nil {
		c.Classifier = errorhandling.NewErrorClassifier()
	}
	return c, nil
}
