package dlq

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
)

// A callback that panics (an alert with a nil client) or calls
// runtime.Goexit (t.FailNow in a test's callback) ran on the caller's
// goroutine, a workflow run's driver or a relay's recorder: a panic took
// the process down, and runtime.Goexit ended the goroutine, so the
// workflow run's Run never returned. Each is now logged at ERROR, Add
// returns, and the callbacks registered after it are still called.
func TestCallbackThatPanicsOrExitsIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, fault := range []struct {
		name string
		do   func()
		log  string
	}{
		{name: "panic", do: func() { panic("nil client") }, log: "panicked while dead-lettering"},
		{name: "Goexit", do: runtime.Goexit, log: "called runtime.Goexit instead of returning while dead-lettering"},
	} {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			q, _ := newTestQueue()
			m := NewManager(q, 1, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			var added, reached int
			m.OnEntryAdded(func(*Entry) { fault.do() })
			m.OnEntryAdded(func(*Entry) { added++ })
			m.OnThresholdReached(func(int) { fault.do() })
			m.OnThresholdReached(func(int) { reached++ })
			returned := make(chan error, 1)
			go func() { returned <- m.Add(ctx, &Entry{}) }()
			if err := <-returned; err != nil {
				t.Fatal(err)
			}
			if added != 1 || reached != 1 {
				t.Errorf("the callbacks after the faulty ones ran %d and %d times, want 1 and 1", added, reached)
			}
			for _, what := range []string{"an OnEntryAdded callback ", "an OnThresholdReached callback "} {
				if !strings.Contains(logs.String(), what+fault.log) {
					t.Errorf("nothing logged says %q:\n%s", what+fault.log, logs.String())
				}
			}
		})
	}
}
