package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
)

// TestDemo runs a small demo to its summary and checks its figures: nothing
// lost, nothing out of order, the breaker opened, the refused messages
// dead-lettered.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	o := demoOptions{exit: true, listen: "127.0.0.1:0", streams: 6, steps: 20, outage: 2 * time.Second, timeout: deliveryNet(t)}
	if err := runDemo(context.Background(), &out, o); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	num := func(label string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(label) + ` +(\d+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %q row in:\n%s", label, text)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	total, delivered, dead, held := num("messages"), num("delivered"), num("dead-lettered"), num("held behind dead letters")
	if total != 2*6*20 || delivered+dead+held != total {
		t.Errorf("messages %d, delivered %d + dead-lettered %d + held %d\n%s", total, delivered, dead, held, text)
	}
	if dead != 4 || num("ValidationFailure") != 4 {
		t.Errorf("dead-lettered %d, want the 4 refused messages\n%s", dead, text)
	}
	if num("order violations") != 0 {
		t.Errorf("order violations\n%s", text)
	}
	if num("breaker openings") < 1 {
		t.Errorf("the outage did not open the breaker\n%s", text)
	}
	if num("released without charge") < 1 {
		t.Errorf("nothing released without charge\n%s", text)
	}
}

// deliveryNet is how long a test lets the demo deliver, a safety net
// only: a little less than the test binary's -timeout leaves, so that a
// demo that never finishes fails with its summary so far. A fixed minute
// failed healthy runs on a loaded machine, where the demo's deliveries
// under -race took longer.
func deliveryNet(t *testing.T) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return demoTimeout
	}
	left := time.Until(d)
	return left - min(left/10, 30*time.Second)
}

// TestDemoServes checks that after its summary the demo serves the admin
// API on its data, and stops on its context.
func TestDemoServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan [2]string, 1)
	o := demoOptions{listen: "127.0.0.1:0", streams: 2, steps: 10, outage: 300 * time.Millisecond, timeout: deliveryNet(t),
		ready: func(url, token string) { ready <- [2]string{url, token} }}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, &out, o) }()
	var at [2]string
	select {
	case at = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before serving: %v\n%s", err, out.String())
	}
	c := &admin.Client{BaseURL: at[0], Token: at[1]}
	l, err := c.DeadLetters(ctx, nil)
	if err != nil || len(l.Items) == 0 {
		t.Errorf("dead letters through the demo's API: %+v %v", l, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("demo after Ctrl-C: %v", err)
	}
}
