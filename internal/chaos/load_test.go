package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// destination is the chaos messages' destination (relayproc.Destination).
const destination = "chaos"

// Write styles of the load generator.
const (
	styleStore = iota // the store's EnqueueTx inside an application transaction that also writes a row of its own
	styleSQL          // plain INSERTs into the outbox table, as another language would write them
)

// writer commits messages to the outbox in one transaction, in argument
// order, and returns their ids.
type writer func(ctx context.Context, msgs []*outbox.Message, style int) ([]string, error)

// load is the load generator's shape.
type load struct {
	streams int           // strict streams, named s0000...
	every   time.Duration // one transaction per goroutine this often
	perTx   int           // messages in each steady transaction
	burstN  int           // messages in a burst transaction
	burstAt int           // every burstAt-th transaction of a goroutine is a burst
	// maxBacklog pauses the load while more committed messages than this
	// wait for their first arrival, so that a slow machine runs the faults
	// against a backlog it can drain rather than one that grows forever.
	maxBacklog int
	// unorderedEvery, when not 0, makes every unorderedEvery-th steady
	// transaction of a goroutine write messages with no stream.
	unorderedEvery int
}

// resolver tells whether a transaction whose commit returned an error
// committed after all (its reply was lost with the server): it returns an
// error while it cannot tell yet.
type resolver func(ctx context.Context, msgs []*outbox.Message) (committed bool, err error)

// generator writes the load with two goroutines, each owning half of the
// streams, so that a stream's messages are committed one transaction
// after another and its Seq order is its n order.
type generator struct {
	l       *ledger
	w       writer
	resolve resolver // nil: a failed write committed nothing
	shape   load
	poison  []chan poisonReq
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	errs    []error
	txs     int
	bursts  int
	skipped int // ticks skipped because of maxBacklog
	// inDoubt counts the writes that failed and were resolved, committed
	// those of them that had committed.
	inDoubt, inDoubtCommitted int
}

// poisonReq asks for the next message of a stream to be a poison message.
type poisonReq struct {
	stream string
	reply  chan *sent
}

const goroutines = 2

func streamName(i int) string { return fmt.Sprintf("s%04d", i) }

func startGenerator(ctx context.Context, l *ledger, w writer, shape load) *generator {
	return startResolvingGenerator(ctx, l, w, nil, shape)
}

// startResolvingGenerator is startGenerator for a writer whose failed
// commits may have committed (the server crashed before it answered):
// resolve settles each such write before the goroutine goes on, as an
// application would look for its own row once the database is back.
func startResolvingGenerator(ctx context.Context, l *ledger, w writer, resolve resolver, shape load) *generator {
	ctx, cancel := context.WithCancel(ctx)
	g := &generator{l: l, w: w, resolve: resolve, shape: shape, stop: cancel}
	for i := range goroutines {
		ch := make(chan poisonReq, 64)
		g.poison = append(g.poison, ch)
		g.wg.Add(1)
		go g.run(ctx, i, ch)
	}
	return g
}

// requestPoison makes the next message of stream i a poison message and
// returns it once committed.
func (g *generator) requestPoison(ctx context.Context, i int) (*sent, error) {
	r := poisonReq{stream: streamName(i), reply: make(chan *sent, 1)}
	select {
	case g.poison[i%goroutines] <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case s := <-r.reply:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// halt stops the generator and returns its errors.
func (g *generator) halt() []error {
	g.stop()
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.errs
}

// errNotCommitted is a failed write that resolve found had not committed.
var errNotCommitted = errors.New("not committed")

// settleInDoubt asks resolve every 100 ms, for up to a minute, until it
// can tell whether msgs committed.
func (g *generator) settleInDoubt(ctx context.Context, msgs []*outbox.Message) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		committed, err := g.resolve(ctx, msgs)
		if err == nil {
			return committed, nil
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-tick.C:
		}
	}
}

func (g *generator) run(ctx context.Context, k int, poison chan poisonReq) {
	defer g.wg.Done()
	var owned []int
	for i := k; i < g.shape.streams; i += goroutines {
		owned = append(owned, i)
	}
	next := make(map[string]int, len(owned))
	rng := rand.New(rand.NewPCG(uint64(k), uint64(time.Now().UnixNano())))
	tick := time.NewTicker(g.shape.every)
	defer tick.Stop()
	for tx := 1; ; tx++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if g.shape.maxBacklog > 0 && g.l.backlog() > g.shape.maxBacklog && len(poison) == 0 {
			g.mu.Lock()
			g.skipped++
			g.mu.Unlock()
			tx--
			continue
		}
		n, style := g.shape.perTx, styleStore
		if tx%2 == 0 {
			style = styleSQL
		}
		burst := g.shape.burstAt > 0 && tx%g.shape.burstAt == 0
		if burst {
			n, style = g.shape.burstN, styleStore
		}
		unordered := !burst && g.shape.unorderedEvery > 0 && tx%g.shape.unorderedEvery == 0
		var msgs []*outbox.Message
		var ss []*sent
		add := func(stream string, isPoison bool) {
			s := &sent{stream: stream, n: next[stream], poison: isPoison}
			next[stream]++
			payload, _ := json.Marshal(body{Stream: s.stream, N: s.n, Poison: isPoison})
			msgs = append(msgs, &outbox.Message{Destination: destination, Stream: stream, Type: "chaos.event", Payload: payload})
			ss = append(ss, s)
		}
		var replies []poisonReq
	drain:
		for {
			select {
			case r := <-poison:
				add(r.stream, true)
				replies = append(replies, r)
			default:
				break drain
			}
		}
		for range n {
			if unordered {
				add("", false) // no stream: delivered in any order
				continue
			}
			add(streamName(owned[rng.IntN(len(owned))]), false)
		}
		// The write is not cut short when the generator stops: a commit
		// cancelled halfway would leave the ledger in doubt.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		ids, err := g.w(wctx, msgs, style)
		wcancel()
		if err != nil && g.resolve != nil {
			committed, rerr := g.settleInDoubt(ctx, msgs)
			g.mu.Lock()
			if rerr != nil {
				g.errs = append(g.errs, fmt.Errorf("%w, and whether it committed is unknown: %w", err, rerr))
			} else {
				g.inDoubt++
				if committed {
					g.inDoubtCommitted++
				}
			}
			g.mu.Unlock()
			if rerr == nil && committed {
				ids, err = make([]string, len(msgs)), nil
				for i, m := range msgs {
					ids[i] = m.ID.String()
				}
			} else if rerr == nil {
				err = errNotCommitted
			}
		}
		if err != nil {
			if g.resolve == nil { // else counted by settleInDoubt's outcome above
				g.mu.Lock()
				g.errs = append(g.errs, err)
				g.mu.Unlock()
			}
			// Nothing was committed: the streams' numbers are reused.
			for _, s := range ss {
				next[s.stream] = min(next[s.stream], s.n)
			}
			for _, r := range replies {
				poison <- r // try again with the next transaction
			}
			continue
		}
		now := time.Now()
		for i, s := range ss {
			s.id, s.at = ids[i], now
		}
		g.l.committed(ss...)
		g.mu.Lock()
		g.txs++
		if burst {
			g.bursts++
		}
		g.mu.Unlock()
		for i, r := range replies {
			r.reply <- ss[i]
		}
	}
}
