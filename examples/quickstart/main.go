// Command quickstart shows Backstop's failure handling end to end on this
// machine, with no set-up: a local webhook that fails on purpose, messages
// on a few ordered streams, retries with back-off for what is transient, a
// circuit breaker guarding the destination, and a dead-letter queue for
// what can never succeed. It prints a summary at the end.
//
//	go run ./examples/quickstart
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

// message is one side effect to deliver.
type message struct {
	ID     string
	Stream string
	Seq    int
	Body   string
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	hook := newFlakyWebhook()
	srv := httptest.NewServer(hook)
	defer srv.Close()

	// Messages: 3 streams of 8; the webhook fails some at first and
	// rejects one for good.
	var msgs []message
	for _, stream := range []string{"order-1", "order-2", "order-3"} {
		for i := 1; i <= 8; i++ {
			msgs = append(msgs, message{ID: fmt.Sprintf("%s/%d", stream, i), Stream: stream, Seq: i, Body: fmt.Sprintf(`{"step":%d}`, i)})
		}
	}
	hook.failFirst("order-1/3", 2) // two 503s, then accepted
	hook.failFirst("order-2/5", 1) // one 503, then accepted
	hook.failFirst("order-3/2", 3) // three 503s, then accepted
	hook.reject("order-2/7")       // 400 every time: never succeeds

	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	breaker := circuitbreaker.New(&circuitbreaker.Config{
		Name: "webhook", MaxFailures: 5, Timeout: 200 * time.Millisecond, Logger: logger,
	})
	queue := dlq.NewMemoryQueue()
	manager := dlq.NewManager(queue, 10, dlq.WithLogger(logger))

	var retries atomic.Int64
	// A quick in-process schedule so the demo finishes in a moment; a
	// relay uses retry.RelayBackoff() (30 s doubling, capped at 1 h).
	cfg := retry.NewConfig(5, retry.NewExponentialBackoff(20*time.Millisecond, 200*time.Millisecond, true)).
		WithRetryCallback(func(int, error) { retries.Add(1) })
	executor := retry.NewExecutor(cfg)

	deliver := func(m message) error {
		return breaker.Execute(ctx, func() error { return post(ctx, srv.URL, m) })
	}

	// One worker per stream keeps each stream's order; streams run in
	// parallel.
	byStream := map[string][]message{}
	for _, m := range msgs {
		byStream[m.Stream] = append(byStream[m.Stream], m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, stream := range byStream {
		wg.Add(1)
		go func(stream []message) {
			defer wg.Done()
			for _, m := range stream {
				err := executor.Execute(ctx, func() error { return deliver(m) })
				if err == nil {
					continue
				}
				// A permanent failure (the 400) is parked with its reason;
				// the stream goes on ("release" ordering).
				last := err
				var re *retry.Error
				if errors.As(err, &re) {
					last = re.Last
				}
				v := errorhandling.NewErrorClassifier().Classify(last)
				entry := &dlq.Entry{
					MessageID: m.ID, Destination: "webhook", Stream: m.Stream, Type: "order.step",
					Payload: []byte(m.Body), Seq: int64(m.Seq), Attempts: attempts(err),
					Reason: v.Reason, FailureReason: v.Reason.String(),
					ErrorMessage: last.Error(), Fingerprint: errorhandling.Fingerprint(last),
				}
				if addErr := manager.Add(ctx, entry); addErr != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, addErr)
					mu.Unlock()
				}
			}
		}(stream)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return summarise(ctx, out, msgs, hook, queue, breaker, retries.Load())
}

// attempts is how many tries a retry error says were made.
func attempts(err error) int {
	var re *retry.Error
	if errors.As(err, &re) {
		return re.Attempts
	}
	return 1
}

// post delivers m and maps the HTTP outcome to an error the classifier
// understands.
func post(ctx context.Context, url string, m message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(m.Body))
	if err != nil {
		return errorhandling.Permanent(err)
	}
	req.Header.Set("Backstop-Message-Id", m.ID)
	req.Header.Set("Backstop-Stream", m.Stream)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err // network errors are transient faults of the destination
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return errorhandling.WithHTTPStatus(fmt.Errorf("webhook answered %s", resp.Status), resp.StatusCode)
}

func summarise(ctx context.Context, out io.Writer, msgs []message, hook *flakyWebhook, queue *dlq.MemoryQueue, breaker *circuitbreaker.CircuitBreaker, retries int64) error {
	entries, err := queue.List(ctx, nil)
	if err != nil {
		return err
	}
	delivered, violations := hook.check()
	stats := breaker.GetStats()
	fmt.Fprintln(out, "Backstop quickstart: summary")
	fmt.Fprintf(out, "  messages          %d on 3 streams\n", len(msgs))
	fmt.Fprintf(out, "  delivered         %d\n", delivered)
	fmt.Fprintf(out, "  retries           %d (transient 503s, backed off)\n", retries)
	fmt.Fprintf(out, "  dead-lettered     %d\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(out, "    %-10s reason=%s attempts=%d error=%q\n", e.MessageID, e.FailureReason, e.Attempts, e.ErrorMessage)
	}
	fmt.Fprintf(out, "  order violations  %d\n", violations)
	fmt.Fprintf(out, "  breaker           %s (%d requests, %d failures)\n", stats.State, stats.TotalRequests, stats.TotalFailures)
	if delivered+len(entries) != len(msgs) {
		return fmt.Errorf("lost messages: %d delivered + %d dead-lettered != %d", delivered, len(entries), len(msgs))
	}
	if violations != 0 {
		return fmt.Errorf("%d order violations", violations)
	}
	return nil
}

// flakyWebhook accepts POSTs, failing chosen messages on purpose, and
// records the order in which each stream's messages arrived.
type flakyWebhook struct {
	mu       sync.Mutex
	failLeft map[string]int
	rejected map[string]bool
	got      map[string][]int // stream -> seqs accepted, in arrival order
}

func newFlakyWebhook() *flakyWebhook {
	return &flakyWebhook{failLeft: map[string]int{}, rejected: map[string]bool{}, got: map[string][]int{}}
}

func (h *flakyWebhook) failFirst(id string, n int) { h.failLeft[id] = n }
func (h *flakyWebhook) reject(id string)           { h.rejected[id] = true }

func (h *flakyWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Backstop-Message-Id")
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.rejected[id]:
		http.Error(w, "unknown order step", http.StatusBadRequest)
	case h.failLeft[id] > 0:
		h.failLeft[id]--
		http.Error(w, "try again later", http.StatusServiceUnavailable)
	default:
		seq, _ := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
		stream := r.Header.Get("Backstop-Stream")
		h.got[stream] = append(h.got[stream], seq)
		w.WriteHeader(http.StatusNoContent)
	}
}

// check returns how many messages arrived and how many arrived before an
// earlier message of their stream.
func (h *flakyWebhook) check() (delivered, violations int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, seqs := range h.got {
		delivered += len(seqs)
		if !sort.IntsAreSorted(seqs) {
			violations++
		}
	}
	return delivered, violations
}
