package store

import (
	"fmt"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// StreamHead is what a store read about a stream's head message, the input
// of DescribeStream.
type StreamHead struct {
	// Message is the head: the earliest message of the stream that is not
	// published and, if dead-lettered, still holds the stream. nil when the
	// stream has none.
	Message *outbox.Message
	// Ordering is the head's effective ordering mode.
	Ordering outbox.Ordering
	// Released says an operator released the stream past the head
	// (ReleaseStream).
	Released bool
	// Later counts the undelivered, not dead-lettered messages after it.
	Later int
}

// maxWhyError bounds the error text quoted in StreamStatus.Why.
const maxWhyError = 200

// DescribeStream sets st.Head, st.Blocked and st.Why from h, applying the
// claim rules of the package doc at now, so that every store explains a
// stream in the same words. st.Pending is left to the caller.
func DescribeStream(st *StreamStatus, h StreamHead, now time.Time) {
	m := h.Message
	st.Head = m
	st.Blocked = false
	if m == nil {
		st.Why = "no undelivered messages"
		return
	}
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	failure := func() string {
		e := []rune(m.Error)
		if len(e) > maxWhyError {
			e = append(e[:maxWhyError], '…')
		}
		switch {
		case m.FailureReason == 0:
			// a destination's fault is recorded without a reason
			return string(e)
		case len(e) == 0:
			return m.FailureReason.String()
		}
		return fmt.Sprintf("%s: %s", m.FailureReason, string(e))
	}
	strictHold := h.Ordering == outbox.OrderingStrict && !h.Released
	var why string
	holds := false
	switch {
	case !m.DeadLetteredAt.IsZero():
		why = fmt.Sprintf("head message %s was dead-lettered at %s after %s", m.ID, ts(m.DeadLetteredAt), counted(int(m.Attempts), "attempt", "attempts"))
		if m.FailureReason != 0 || m.Error != "" {
			// a message dead-lettered by hand may never have failed
			why += fmt.Sprintf(" (%s)", failure())
		}
		holds = strictHold
		if holds && h.Later > 0 {
			st.Blocked = true
			st.Why = fmt.Sprintf("%s; %s behind it until an operator releases the stream, or replays "+
				"the message's dead-letter entry (strict ordering; resolving the entry does not release the stream)", why, laterWait(h.Later))
			return
		}
	case m.LeaseExpiry.After(now):
		why = fmt.Sprintf("head message %s is being delivered by instance %s (lease until %s)",
			m.ID, m.InstanceID, ts(m.LeaseExpiry))
		holds = h.Ordering != outbox.OrderingNone
	case m.ScheduledFor.After(now) && (m.Attempts > 0 || m.Status.Has(outbox.StatusFailed)):
		why = fmt.Sprintf("head message %s failed %s (%s) and waits for its retry at %s",
			m.ID, counted(int(m.Attempts), "time", "times"), failure(), ts(m.ScheduledFor))
		holds = strictHold
	case m.ScheduledFor.After(now):
		why = fmt.Sprintf("head message %s is scheduled for %s", m.ID, ts(m.ScheduledFor))
		if m.Error != "" {
			why += fmt.Sprintf(" (last error %s)", failure())
		}
		holds = strictHold
	default:
		why = fmt.Sprintf("head message %s is due and will be claimed next", m.ID)
		switch {
		case m.Attempts > 0:
			why += fmt.Sprintf(" (it failed %s before: %s)", counted(int(m.Attempts), "time", "times"), failure())
		case m.Error != "":
			why += fmt.Sprintf(" (its last try failed, not charged: %s)", failure())
		}
	}
	mode := string(h.Ordering) + " ordering"
	if h.Released {
		mode += ", released by an operator"
	}
	switch {
	case h.Later == 0:
		st.Why = why + "; no later messages"
	case holds:
		st.Blocked = true
		st.Why = fmt.Sprintf("%s; %s behind it (%s)", why, laterWait(h.Later), mode)
	default:
		st.Why = fmt.Sprintf("%s; %s (%s)", why, counted(h.Later, "later message is not held back", "later messages are not held back"), mode)
	}
}

// counted is n with the noun that fits it: 1 attempt, 2 attempts.
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// laterWait says how many later messages wait.
func laterWait(n int) string { return counted(n, "later message waits", "later messages wait") }
