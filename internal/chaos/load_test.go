package chaos

import (
	"context"
	"encoding/json"
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
}

// generator writes the load with two goroutines, each owning half of the
// streams, so that a stream's messages are committed one transaction
// after another and its Seq order is its n order.
type generator struct {
	l      *ledger
	w      writer
	shape  load
	poison []chan poisonReq
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	errs    []error
	txs     int
	bursts  int
	skipped int // ticks skipped because of maxBacklog
}

// poisonReq asks for the next message of a stream to be a poison message.
type poisonReq struct {
	stream string
	reply  chan *sent
}

const goroutines = 2

func streamName(i int) string { return fmt.Sprintf("s%04d", i) }

func startGenerator(ctx context.Context, l *ledger, w writer, shape load) *generator {
	ctx, cancel := context.WithCancel(ctx)
	g := &generator{l: l, w: w, shape: shape, stop: cancel}
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
			add(streamName(owned[rng.IntN(len(owned))]), false)
		}
		// The write is not cut short when the generator stops: a commit
		// cancelled halfway would leave the ledger in doubt.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		ids, err := g.w(wctx, msgs, style)
		wcancel()
		if err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
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
