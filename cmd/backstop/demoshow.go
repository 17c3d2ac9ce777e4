package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
)

// demoTimeout bounds the delivery part of the demo.
const demoTimeout = 2 * time.Minute

// follow shows the progress until every message is delivered, dead-lettered
// or waiting behind a dead letter. On a terminal it redraws one line; else
// it prints a line a second.
func (d *demoRun) follow(ctx context.Context, out io.Writer, produced <-chan error) (bool, error) {
	every := time.Second
	if d.o.live {
		every = 100 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	limit := d.o.timeout
	if limit == 0 {
		limit = demoTimeout
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	writing := true
	for {
		select {
		case <-ctx.Done():
			d.progress(out, true)
			return false, nil
		case <-deadline.C:
			d.progress(out, true)
			return false, fmt.Errorf("gave up after %s: %+v", limit, d.relay.Stats())
		case err := <-produced:
			if err != nil {
				return false, err
			}
			writing, produced = false, nil
		case <-tick.C:
			s := d.relay.Stats()
			done := !writing && int(s.Delivered+s.DeadLettered) >= d.total-d.held
			d.progress(out, done)
			if done {
				return true, nil
			}
		}
	}
}

// progress prints one progress line; last ends a live line.
func (d *demoRun) progress(out io.Writer, last bool) {
	s := d.relay.Stats()
	var breakers []string
	for _, name := range demoDestinations {
		if st := s.Destinations[name].Breaker; st != circuitbreaker.StateClosed {
			breakers = append(breakers, name+" "+st.String())
		}
	}
	b := "closed"
	if len(breakers) > 0 {
		b = strings.Join(breakers, ", ")
	}
	line := fmt.Sprintf("%5.1fs  delivered %d/%d  retried %d  released %d  dead-lettered %d  breakers: %s",
		time.Since(d.start).Seconds(), s.Delivered, d.total, s.Retries, s.Released, s.DeadLettered, b)
	switch {
	case d.o.live && last:
		fmt.Fprintf(out, "\r\033[K%s\n\n", line)
	case d.o.live:
		fmt.Fprintf(out, "\r\033[K%s", line)
	default:
		fmt.Fprintln(out, line)
		if last {
			fmt.Fprintln(out)
		}
	}
}

// summary prints the closing table and checks that nothing was lost,
// duplicated or delivered out of order.
func (d *demoRun) summary(ctx context.Context, out io.Writer, elapsed time.Duration) error {
	s := d.relay.Stats()
	h := d.hook.counts()
	entries, err := d.st.DLQ().List(ctx, nil)
	if err != nil {
		return err
	}
	byReason := map[string]int{}
	for _, e := range entries {
		byReason[e.FailureReason]++
	}
	blocked, err := d.st.BlockedStreams(ctx)
	if err != nil {
		return err
	}
	tw := &strings.Builder{}
	row := func(name string, n any, note string) {
		fmt.Fprintf(tw, "  %-26s %8v  %s\n", name, n, note)
	}
	row("messages", d.total, fmt.Sprintf("on %d streams, written in the application's transactions", len(demoDestinations)*d.o.streams))
	row("delivered", s.Delivered, fmt.Sprintf("webhook accepted %d, every signature verified", h.accepted))
	row("retried", s.Retries, "in-process retries of a blip, inside one attempt")
	row("released without charge", s.Released, "destination faults and an open breaker: no attempt charged")
	row("attempts charged", s.Failed, "failures blamed on the message")
	row("dead-lettered", len(entries), "")
	for _, r := range slices.Sorted(mapsKeys(byReason)) {
		row("  "+r, byReason[r], reasonNote(r))
	}
	row("held behind dead letters", d.held, fmt.Sprintf("in %d blocked streams (strict order): backstop streams show / release", blocked))
	var trips int64
	var tripped []string
	for _, name := range demoDestinations {
		if n := s.Destinations[name].BreakerTrips; n > 0 {
			trips += n
			tripped = append(tripped, fmt.Sprintf("%s %d", name, n))
		}
	}
	row("breaker openings", trips, strings.Join(tripped, ", "))
	row("endpoint answers", "", answers(h.answered))
	if h.duplicates > 0 { // at least once: a request that outlived the relay's timeout is sent again
		row("duplicates dropped", h.duplicates, "sent again after a timeout; the endpoint de-duplicates on webhook-id")
	}
	row("order violations", h.violations, "")
	row("elapsed", elapsed.Round(10*time.Millisecond), "")
	fmt.Fprint(out, strings.ReplaceAll(tw.String(), "  \n", "\n"))
	switch {
	case h.violations != 0:
		return fmt.Errorf("%d order violations", h.violations)
	case int(s.Delivered) != h.accepted, int(s.Delivered)+len(entries)+d.held != d.total:
		return fmt.Errorf("lost or duplicated messages: %d delivered (%d accepted), %d dead-lettered, %d held, %d written",
			s.Delivered, h.accepted, len(entries), d.held, d.total)
	}
	return nil
}

func reasonNote(reason string) string {
	if reason == "ValidationFailure" {
		return "422 from the endpoint: the message's fault, not retried"
	}
	return ""
}

func answers(m map[int]int) string {
	var parts []string
	for _, status := range slices.Sorted(mapsKeys(m)) {
		parts = append(parts, fmt.Sprintf("%d×%d", m[status], status))
	}
	return strings.Join(parts, " ")
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
