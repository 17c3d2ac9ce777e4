package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/backstophq/backstop/errorhandling"
)

// result is how one attempt's function returned.
type result struct {
	taskID  string
	attempt int
	err     error
	tc      *TaskContext
	// cause is why the attempt's context was cancelled, nil if it was
	// not: ErrRunStopped, the driver's reason to stop, or a timeout.
	cause error
}

// errAttemptTimeout cancels an attempt that ran past its task's Timeout.
var errAttemptTimeout = errors.New("attempt timed out")

// errGoexit is the error of an attempt whose function called
// runtime.Goexit instead of returning.
var errGoexit = errors.New("the task function ended its goroutine with runtime.Goexit instead of returning")

// runAttempt calls the task's function under its timeout (timed by the
// engine's clock), turns a panic into a *PanicError, and sends the result.
// It holds one token of e.sem, which it gives back before sending.
func (e *Engine) runAttempt(ctx context.Context, cancel context.CancelCauseFunc, tc *TaskContext, out chan<- result) {
	defer cancel(nil)
	stop := make(chan struct{})
	if d := tc.task.Timeout; d > 0 {
		timer := e.cfg.Clock.NewTimer(d)
		go func() {
			select {
			case <-timer.C():
				cancel(errAttemptTimeout)
			case <-stop:
				timer.Stop()
			case <-ctx.Done():
				timer.Stop()
			}
		}()
	}
	go e.watchCancelled(ctx, tc, stop)
	returned := false
	defer func() {
		if returned {
			return
		}
		// The function ended the goroutine with runtime.Goexit (t.FailNow
		// in a test, a library exiting its goroutine): it neither returned
		// nor panicked, and without its result and token the run waited
		// for ever. The attempt fails instead.
		close(stop)
		<-e.sem
		out <- result{taskID: tc.task.ID, attempt: tc.attempt, tc: tc, err: errGoexit}
	}()
	err := call(ctx, tc)
	returned = true
	close(stop)
	r := result{taskID: tc.task.ID, attempt: tc.attempt, err: err, tc: tc}
	if ctx.Err() != nil {
		r.cause = context.Cause(ctx)
		// Past its timeout the attempt fails, whatever the function
		// returned once cancelled: one that ignores its context and
		// returns nil late succeeded only by chance, after the time the
		// task allowed (Task.Timeout).
		if errors.Is(r.cause, errAttemptTimeout) {
			r.err = &TimeoutError{TaskID: tc.task.ID, Timeout: tc.task.Timeout, Err: err}
		}
	}
	<-e.sem
	out <- r
}

// watchCancelled warns, abandonGrace after the attempt's context was
// cancelled while its run goes on (past the task's Timeout, or stopped by
// another task's failure under the fail policy), that its function has not
// returned. The driver waits for it, the lease renewed, so that the task
// never runs twice at once; a function that ignores its context kept the
// run waiting for ever without a word of which task held it. A shutdown's
// cancellation is not watched here: abort abandons such attempts and says
// so. stop is closed when the function returns.
func (e *Engine) watchCancelled(ctx context.Context, tc *TaskContext, stop <-chan struct{}) {
	select {
	case <-stop:
		return
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, errAttemptTimeout) && !errors.Is(cause, ErrRunStopped) {
		return
	}
	if !sleepUntil(e.cfg.Clock, e.cfg.Clock.Now().Add(abandonGrace), stop) {
		return
	}
	tc.logger.LogAttrs(context.Background(), slog.LevelWarn,
		"attempt did not return after its context was cancelled; the task may ignore its context, and the run waits for it",
		slog.String("cause", cause.Error()), slog.Duration("grace", abandonGrace))
}

// call runs the task's function, recovering a panic.
func call(ctx context.Context, tc *TaskContext) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	err = tc.task.Run(ctx, tc)
	if err != nil {
		checkError(err)
	}
	return err
}

// checkError reads err's message, which the driver logs, classifies and
// records on its own goroutine, and walks its chain, which the classifier
// (errors.Is, errors.As) and the dead-letter queue (the fingerprint's root
// cause, the reason attached) walk there too. An Error, Unwrap, Is or As
// method that panics (a typed nil pointer returned as an error, a wrapper
// whose cause is a nil pointer) would take the process down there, and
// again on every resume of the run; an Unwrap chain that never ends (an
// Unwrap that returns its receiver) kept the driver's goroutine in errors.Is
// for ever, the run's lease renewed. Either panics here instead, inside
// call's recovery, saying so.
func checkError(err error) {
	checkMessage(err)
	checkChain(err)
}

// checkMessage reads err's message.
func checkMessage(err error) {
	defer func() {
		if v := recover(); v != nil {
			panic(fmt.Sprintf("the Error method of the returned %T panicked: %v", err, v))
		}
	}()
	_ = err.Error()
}

// checkChain walks err's Unwrap tree (errorhandling.ChainEnds) and then
// exercises the Is and As methods in it as errors.Is and errors.As do; it
// panics, saying so, if one of the methods does or the tree does not end.
func checkChain(err error) {
	var current string
	defer func() {
		if v := recover(); v != nil {
			if current == "" {
				panic(v)
			}
			panic(fmt.Sprintf("%s of an error in the chain of the returned %T panicked: %v", current, err, v))
		}
	}()
	current = "the Unwrap method"
	if !errorhandling.ChainEnds(err) {
		current = ""
		panic(fmt.Sprintf("the Unwrap chain of the returned %T does not end (over %d errors)", err, errorhandling.MaxChainErrors))
	}
	current = "the Is or As method"
	_ = errors.Is(err, errChainProbe)
	var target *chainProbe
	_ = errors.As(err, &target)
}

// errChainProbe and chainProbe are what checkChain looks for: nothing
// matches them, so every Is and As method in a chain is called.
var errChainProbe = errors.New("workflow: error chain probe")

type chainProbe struct{}

func (*chainProbe) Error() string { return "workflow: error chain probe" }
