package e2e

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/transporttest"
)

// byID indexes messages by the text form of their id, as deliveries carry
// it.
func byID(msgs []*outbox.Message) map[string]*outbox.Message {
	out := make(map[string]*outbox.Message, len(msgs))
	for _, m := range msgs {
		out[m.ID.String()] = m
	}
	return out
}

// checkIntact checks that every delivery is one of want, with its stream,
// type, payload and headers as written, and returns how many times each
// message arrived.
func checkIntact(t *testing.T, want map[string]*outbox.Message, got []transporttest.Delivery) map[string]int {
	t.Helper()
	arrived := make(map[string]int, len(want))
	for _, d := range got {
		m, ok := want[d.ID]
		if !ok {
			t.Errorf("a message nobody committed arrived: id %q, payload %s", d.ID, d.Payload)
			continue
		}
		arrived[d.ID]++
		if d.Stream != m.Stream || d.Type != m.Type || !bytes.Equal(d.Payload, m.Payload) {
			t.Errorf("message %s arrived as stream %q, type %q, payload %s; written as %q, %q, %s",
				d.ID, d.Stream, d.Type, d.Payload, m.Stream, m.Type, m.Payload)
		}
		if v := header(d.Headers, "X-Tenant"); v != m.Headers["X-Tenant"] {
			t.Errorf("message %s arrived with X-Tenant %q, written with %q", d.ID, v, m.Headers["X-Tenant"])
		}
	}
	return arrived
}

// header looks name up in h case-insensitively.
func header(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// checkStreamOrder checks that the messages of each stream arrived in Seq
// order, counting each message at its first arrival and, separately, at
// its last: a re-send after a crash may repeat a stream's messages from
// the first one not recorded, but never sends a message before an earlier
// one of its stream, nor repeats one after a later one arrived for the
// last time. Messages without a stream have no order.
func checkStreamOrder(t *testing.T, want map[string]*outbox.Message, got []transporttest.Delivery) {
	t.Helper()
	seqs := map[string][]int64{} // per stream, the Seq of each arrival in arrival order
	for _, d := range got {
		if m, ok := want[d.ID]; ok && m.Stream != "" {
			seqs[m.Stream] = append(seqs[m.Stream], m.Seq)
		}
	}
	for stream, arrivals := range seqs {
		first := distinct(arrivals)
		last := distinct(reversed(arrivals))
		slices.Reverse(last)
		for what, order := range map[string][]int64{"first": first, "last": last} {
			if !slices.IsSorted(order) {
				t.Errorf("stream %s out of order: Seq by %s arrival %v (all arrivals %v)", stream, what, order, arrivals)
			}
		}
	}
}

// distinct returns s without repeats, keeping first occurrences.
func distinct(s []int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func reversed(s []int64) []int64 {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// checkDrained checks that the outbox holds no row (every delivered
// message was published and deleted) and the dead-letter queue no entry.
func checkDrained(t *testing.T, ctx context.Context, db *database) {
	t.Helper()
	if n, err := db.rows(ctx); err != nil || n != 0 {
		t.Errorf("outbox rows after delivery = %d (err %v), want 0", n, err)
	}
	if n, err := db.DLQ().Count(ctx); err != nil || n != 0 {
		t.Errorf("dead letters = %d (err %v), want 0", n, err)
	}
}
