package relay

import (
	"math"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The prefetch grows between Config.BatchSize and Config.MaxBatchSize to
// what the relay delivers in prefetchHorizon, measured over windows of at
// least prefetchSample.
const (
	prefetchHorizon = 250 * time.Millisecond
	prefetchSample  = 100 * time.Millisecond
	// messageOverhead is counted for each message held besides its
	// payload and headers: its id and the rest of its row. It is what the
	// store's claim counts too (store.ClaimOverhead), so that a message
	// without headers counts no more here than in the claim's MaxBytes,
	// and a claim the store kept within the budget is kept here whole.
	messageOverhead = store.ClaimOverhead
	// headersOverhead and headerOverhead are counted for a message's
	// headers besides their names and values: the map, and each entry's
	// slot and string headers (about 100 bytes an entry measured on
	// amd64: 64 short headers took six times their names and values).
	headersOverhead = 320
	headerOverhead  = 128
)

// prefetch sizes the relay's prefetch: how many messages it holds leased.
// Its target follows the rate at which the relay ends flights, so that a
// relay that delivers fast moves more messages per store call, and one
// that delivers slowly holds no more than BatchSize. Only the claimer's
// goroutine touches a prefetch.
type prefetch struct {
	min, max int
	budget   int64 // PrefetchBytes
	workers  int
	meter
	// size is the smoothed bytes of a message claimed; 0 before the
	// first claim.
	size float64
}

// meter measures a rate of flights ended, smoothed over windows of at
// least prefetchSample.
type meter struct {
	at    time.Time // the start of the current sample
	ended uint64    // flights ended before it
	rate  float64   // flights ended per second, smoothed
}

func newPrefetch(c *Config, now time.Time) *prefetch {
	return &prefetch{min: c.BatchSize, max: c.MaxBatchSize, budget: c.PrefetchBytes, workers: c.Workers, meter: meter{at: now}}
}

// observe takes the count of flights ended so far at now.
func (p *prefetch) observe(now time.Time, ended uint64) {
	if p.min == p.max {
		return
	}
	p.meter.observe(now, ended)
}

// observe takes the count of flights ended so far at now. A window
// shorter than prefetchSample waits for more; a clock that went back
// starts a new one.
func (m *meter) observe(now time.Time, ended uint64) {
	dt := now.Sub(m.at)
	switch {
	case dt < 0:
		m.at, m.ended = now, ended
		return
	case dt < prefetchSample:
		return
	}
	inst := float64(ended-m.ended) / dt.Seconds()
	if m.rate == 0 {
		m.rate = inst
	} else {
		m.rate = (m.rate + inst) / 2
	}
	m.at, m.ended = now, ended
}

// target is how many messages the relay should hold now.
func (p *prefetch) target() int {
	if p.min == p.max {
		return p.min
	}
	want := p.rate * prefetchHorizon.Seconds()
	if want >= float64(p.max) {
		return p.max
	}
	return max(p.min, int(math.Ceil(want)))
}

// claimed takes the messages a claim returned into the size estimate.
func (p *prefetch) claimed(ms []*outbox.Message) {
	if len(ms) == 0 {
		return
	}
	var n int64
	for _, m := range ms {
		n += messageBytes(m)
	}
	avg := float64(n) / float64(len(ms))
	if p.size == 0 {
		p.size = avg
	} else {
		p.size = (p.size + avg) / 2
	}
}

// room is how many more messages the relay may claim while holding held
// messages of heldBytes (a message larger than PrefetchBytes by itself
// left out: heldBudget): what the target leaves, less when the bytes held
// near PrefetchBytes, at least what brings it to Workers; none once they
// reach it. While some of the budget is left, at least one: the claim
// stops at the bytes left (bytesLeft).
// Before the first claim the size of a message is unknown, and each is
// taken to be as large as a payload may be (outbox.DefaultMaxPayloadBytes).
func (p *prefetch) room(held int, heldBytes int64) int {
	left := p.budget - heldBytes
	if left <= 0 {
		return 0
	}
	size := p.size
	if size == 0 {
		size = outbox.DefaultMaxPayloadBytes + messageOverhead
	}
	n := min(p.target()-held, max(int(float64(left)/size), 1))
	return max(n, p.workers-held, 0)
}

// bytesLeft is what a claim may bring back while the relay holds
// messages of heldBytes, a message larger than PrefetchBytes left out
// (store.ClaimRequest.MaxBytes): what they leave of PrefetchBytes; and
// whether the claim's first message may be of any size
// (FirstAnySize): unless the relay holds such a message (big).
//
// So a message larger than what is left is claimed, alone, whenever the
// relay claims (room); were it to wait until the relay held nothing, it
// would hold up every claim behind it in seq order, of every destination,
// for as long as a slow destination kept a delivery in flight. And one
// larger than PrefetchBytes by itself does not count against the budget
// while it is held, so that the relay goes on claiming the others: it
// held up every claim while it was in flight, for as long as its own
// destination took. The relay holds at most PrefetchBytes and one message
// more: a claim comes only while what it counts is under the budget, it
// brings back a big message only first and alone, and none while one is
// held.
func (p *prefetch) bytesLeft(heldBytes int64, big bool) (int64, bool) {
	return max(p.budget-heldBytes, 1), !big
}

// messageBytes is what holding m counts against PrefetchBytes.
func messageBytes(m *outbox.Message) int64 {
	n := int64(len(m.Payload) + messageOverhead)
	if len(m.Headers) > 0 {
		n += headersOverhead
	}
	for k, v := range m.Headers {
		n += int64(len(k) + len(v) + headerOverhead)
	}
	return n
}
