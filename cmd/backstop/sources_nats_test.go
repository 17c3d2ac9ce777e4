package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/backstophq/backstop/internal/testenv"
)

// records is a slog.Handler that keeps the records it is given and
// signals each on added.
type records struct {
	mu    sync.Mutex
	all   []slog.Record
	added chan struct{}
}

func newRecords() *records { return &records{added: make(chan struct{}, 100)} }

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.all = append(h.all, r.Clone())
	h.mu.Unlock()
	select {
	case h.added <- struct{}{}:
	default:
	}
	return nil
}

// find returns the attributes of the first record with message msg.
func (h *records) find(msg string) (map[string]string, slog.Level, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.all {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		return attrs, r.Level, true
	}
	return nil, 0, false
}

// TestNATSSourceAsyncErrorWithoutSubscription calls the source's
// asynchronous error handler as nats.go does for an error of the
// connection's own (no subscription): a warning with the error and no
// subject, and no panic on the nil subscription.
func TestNATSSourceAsyncErrorWithoutSubscription(t *testing.T) {
	h := newRecords()
	var o nats.Options
	for _, opt := range natsSourceOptions("orders", slog.New(h)) {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.AsyncErrorCB == nil {
		t.Fatal("natsSourceOptions sets no asynchronous error handler: nats.go prints such errors on stderr")
	}
	o.AsyncErrorCB(nil, nil, errors.New("permissions violation"))
	attrs, level, ok := h.find("NATS asynchronous error")
	if !ok || level != slog.LevelWarn {
		t.Fatalf("records %v, want a warning \"NATS asynchronous error\"", h.all)
	}
	if attrs["error"] != "permissions violation" {
		t.Errorf("error = %q, want the error", attrs["error"])
	}
	if _, ok := attrs["subject"]; ok {
		t.Errorf("attrs %v name a subject for an error without a subscription", attrs)
	}
}

// TestNATSSourceLogsAsyncErrors makes nats.go raise a real asynchronous
// error on a connection with the source's options (a subscription whose
// handler falls behind: a slow consumer) and checks that it reaches the
// source's logger as a warning that names the subject, instead of
// nats.go's default of printing it on stderr.
func TestNATSSourceLogsAsyncErrors(t *testing.T) {
	t.Parallel()
	h := newRecords()
	nc, err := nats.Connect(testenv.NATSURL(), append(natsSourceOptions("orders", slog.New(h)), nats.Timeout(2*time.Second))...)
	if err != nil {
		testenv.Unreachable(t, "NATS at "+testenv.NATSURL(), testenv.NATSEnv, err)
	}
	t.Cleanup(nc.Close)
	subject := "sourcetest." + strings.ReplaceAll(uuid.NewString(), "-", "")
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	// One message may wait while the handler holds the first: the third
	// overflows the subscription.
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if attrs, level, ok := h.find("NATS asynchronous error"); ok {
			if level != slog.LevelWarn || attrs["subject"] != subject || !strings.Contains(attrs["error"], "slow consumer") {
				t.Errorf("record level %v, attrs %v; want a warning naming %s and the slow consumer", level, attrs, subject)
			}
			break
		}
		select {
		case <-h.added:
		case <-ctx.Done():
			t.Fatalf("no asynchronous error logged: %v", ctx.Err())
		}
	}
	once.Do(func() { close(release) })
}
