package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// TestChaosInboxPostgresCrash crashes PostgreSQL under an inbox: senders
// hand messages of strict streams to Inbox.Receive as a source would
// (each message again until it is acknowledged, and some again after it
// was, as a source redelivers after a lost acknowledgement), a
// transactional handler writes one effect row per message, and the server
// is killed with SIGKILL and started again while they work. Each message
// acknowledged must have its effect exactly once, in its stream's order,
// and none may be dead-lettered.
func TestChaosInboxPostgresCrash(t *testing.T) {
	t.Parallel()
	sz := chaosSize()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg := newCluster(t)
	pg.exec(ctx, `CREATE SCHEMA `+crashSchema+`;
		CREATE TABLE `+crashSchema+`.effects (id bigserial PRIMARY KEY, message_id text NOT NULL, stream text NOT NULL, n int NOT NULL)`)
	st, err := postgres.Open(ctx, pg.URL("application_name=backstop_chaos_inbox"),
		store.Config{LeaseDuration: lease, InstanceTimeout: instanceTimeout}, postgres.WithSchema(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	in, err := inbox.New(st, inbox.Config{Name: "orders",
		Relay: relay.Config{Instance: store.Instance{ID: "inbox"}, PollInterval: 20 * time.Millisecond,
			MaxPollInterval: 100 * time.Millisecond, Logger: quiet},
		Handling: relay.Destination{InProcess: retry.NewConfig(2, retry.NewFixedDelay(50*time.Millisecond, false))}})
	if err != nil {
		t.Fatal(err)
	}
	var handled progress
	in.Handle("order.placed", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
		var b body
		if err := json.Unmarshal(msg.Payload, &b); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+crashSchema+`.effects (message_id, stream, n) VALUES ($1, $2, $3)`,
			msg.ID, b.Stream, b.N); err != nil {
			return err
		}
		handled.add()
		return nil
	})
	runCtx, stopInbox := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- in.Run(runCtx) }()
	defer func() {
		stopInbox()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("inbox Run: %v", err)
		}
	}()

	// The senders: each owns some streams and sends their messages one
	// after another, each until Receive acknowledges it; every fifth is
	// sent once more after its acknowledgement.
	const senders, streamsEach = 2, 20
	var (
		mu        sync.Mutex
		acked     = map[string]string{} // message id -> stream
		refusals  atomic.Int64
		resent    atomic.Int64
		sendersWG sync.WaitGroup
	)
	sendCtx, stopSending := context.WithCancel(ctx)
	send := func(k int) {
		defer sendersWG.Done()
		for n := 0; sendCtx.Err() == nil; n++ {
			stream := fmt.Sprintf("o%d-%02d", k, n%streamsEach)
			seq := n / streamsEach
			id := fmt.Sprintf("%s-%d", stream, seq)
			payload, _ := json.Marshal(body{Stream: stream, N: seq})
			r := inbox.Received{ID: id, Type: "order.placed", Stream: stream, Payload: payload, Source: "chaos"}
			times := 1
			if n%5 == 4 {
				times = 2
			}
			for i := range times {
				for {
					if _, err := in.Receive(context.WithoutCancel(sendCtx), r); err == nil {
						break
					}
					refusals.Add(1)
					<-time.After(50 * time.Millisecond) // a source's redelivery delay
				}
				if i == 1 {
					resent.Add(1)
				}
			}
			mu.Lock()
			acked[id] = stream
			mu.Unlock()
		}
	}
	for k := range senders {
		sendersWG.Add(1)
		go send(k)
	}
	waitHandled := func(n int64) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := handled.wait(wctx, n); err != nil {
			t.Fatalf("under %d messages handled in 30 s (%d)", n, handled.load())
		}
	}
	var notes []string
	for i := range sz.crashes {
		waitHandled(handled.load() + int64(sz.crashAfter)/4)
		pg.crash()
		<-time.After(sz.crashDown)
		took := pg.start()
		notes = append(notes, fmt.Sprintf("crash #%d: down %v, recovered in %v", i+1, sz.crashDown, took.Round(time.Millisecond)))
	}
	waitHandled(handled.load() + 100)
	stopSending()
	sendersWG.Wait()

	// Every acknowledged message handled: the inbox's rows all settled.
	deadline := time.Now().Add(sz.recoverLimit)
	for {
		var pending int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+crashSchema+`.backstop_outbox
			WHERE destination = $1 AND published_at IS NULL AND dead_lettered_at IS NULL`, inbox.Destination("orders")).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d received messages still unhandled %v after the load stopped", pending, sz.recoverLimit)
		}
		<-time.After(20 * time.Millisecond)
	}
	rows, err := st.Pool().Query(ctx, `SELECT message_id, stream, n FROM `+crashSchema+`.effects ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type effect struct {
		id, stream string
		n          int
	}
	effects, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (effect, error) {
		var e effect
		err := r.Scan(&e.id, &e.stream, &e.n)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	times := map[string]int{}
	last := map[string]int{}
	var twice, unknown, disorder []string
	for _, e := range effects {
		times[e.id]++
		if times[e.id] == 2 && len(twice) < 5 {
			twice = append(twice, e.id)
		}
		if _, ok := acked[e.id]; !ok && len(unknown) < 5 {
			// handled, though the sender never saw it acknowledged: the
			// answer was lost with the server; it must be acknowledged
			// when sent again, which the sender did (so it is in acked)
			unknown = append(unknown, e.id)
		}
		if l, ok := last[e.stream]; ok && e.n != l+1 && len(disorder) < 5 {
			disorder = append(disorder, fmt.Sprintf("%s #%d after #%d", e.stream, e.n, l))
		}
		last[e.stream] = e.n
	}
	missing := 0
	for id := range acked {
		if times[id] == 0 {
			missing++
		}
	}
	dead, err := st.DLQ().List(ctx, &dlq.Filters{Destination: inbox.Destination("orders")})
	if err != nil {
		t.Fatal(err)
	}
	publishSection(t, fmt.Sprintf("Inbox on PostgreSQL crashed (%s size)", sz.name), [][2]string{
		{"crashes", strings.Join(notes, "; ")},
		{"messages acknowledged by Receive", fmt.Sprint(len(acked))},
		{"**effects** (one expected per message)", fmt.Sprint(len(effects))},
		{"**handled twice**", fmt.Sprint(len(twice))},
		{"**acknowledged, never handled**", fmt.Sprint(missing)},
		{"**effects out of stream order**", fmt.Sprint(len(disorder))},
		{"**dead-lettered**", fmt.Sprint(len(dead))},
		{"Receive calls refused while the server was down (sent again)", fmt.Sprint(refusals.Load())},
		{"messages sent again after their acknowledgement (dropped as duplicates)", fmt.Sprint(resent.Load())},
	})
	if missing > 0 {
		t.Errorf("%d acknowledged messages have no effect", missing)
	}
	if len(effects) != len(acked) || len(twice) > 0 {
		t.Errorf("%d effects for %d acknowledged messages; handled twice: %v", len(effects), len(acked), twice)
	}
	if len(unknown) > 0 {
		t.Errorf("effects of messages never acknowledged: %v", unknown)
	}
	if len(disorder) > 0 {
		t.Errorf("effects out of their stream's order: %v", disorder)
	}
	if len(dead) > 0 {
		t.Errorf("%d received messages dead-lettered, first: %s %s", len(dead), dead[0].FailureReason, dead[0].ErrorMessage)
	}
}

// progress counts events and lets a test wait for a count without
// polling: each add wakes the waiters.
type progress struct {
	mu      sync.Mutex
	n       int64
	changed chan struct{}
}

func (p *progress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

func (p *progress) load() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// wait returns once n events were counted, or ctx's error.
func (p *progress) wait(ctx context.Context, n int64) error {
	for {
		p.mu.Lock()
		if p.n >= n {
			p.mu.Unlock()
			return nil
		}
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
