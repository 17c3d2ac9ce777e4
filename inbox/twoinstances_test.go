package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/backstophq/backstop/store"
)

// Two instances of one inbox on one PostgreSQL database receive every
// message at the same time, twice each, and run the handlers side by side;
// a handler fails its first attempt of every third message on whichever
// instance runs it, and the other may retry it. Every message is stored
// once and its effect committed once.
func TestTwoInstancesReceiveAndHandleOnce(t *testing.T) {
	t.Parallel()
	k := kinds[1]
	a := newEnv(t, k)
	b := openEnv(t, k, a.spec, a.clk)
	var mu sync.Mutex
	failed := map[string]bool{}
	handler := func(e *env) Handler {
		return func(ctx context.Context, tx store.Tx, msg *Message) error {
			mu.Lock()
			var n int
			fmt.Sscanf(msg.ID, "m-%d", &n)
			first := n%3 == 0 && !failed[msg.ID]
			failed[msg.ID] = true
			mu.Unlock()
			if first {
				return errors.New("flaky downstream")
			}
			return e.record(ctx, tx, msg)
		}
	}
	inA, inB := a.newInbox(a.config()), b.newInbox(b.config())
	inA.Handle("t", handler(a))
	inB.Handle("t", handler(b))
	a.run(inA)
	b.run(inB)
	const n = 60
	var wg sync.WaitGroup
	var dups, errs sync.Map
	for i := range n {
		for j, in := range []*Inbox{inA, inB, inA, inB} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := received(fmt.Sprintf("m-%d", i), "t", fmt.Sprintf("s-%d", i%5))
				dup, err := in.Receive(a.ctx, r)
				if err != nil {
					errs.Store(fmt.Sprint(i, j), err)
				}
				if !dup {
					v, _ := dups.LoadOrStore(r.ID, new(int))
					mu.Lock()
					*v.(*int)++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	errs.Range(func(k, v any) bool { t.Errorf("Receive %v: %v", k, v); return true })
	dups.Range(func(k, v any) bool {
		if *v.(*int) != 1 {
			t.Errorf("%v stored %d times", k, *v.(*int))
		}
		return true
	})
	a.waitFor("every message handled", func() bool { return a.count(`SELECT count(*) FROM `+a.table) >= n })
	a.waitFor("no inbox rows left", func() bool {
		return a.count(`SELECT count(*) FROM `+k.outbox(a.spec)+` WHERE destination = 'inbox:orders'`) == 0
	})
	if got := a.count(`SELECT count(DISTINCT source_id) FROM ` + a.table); got != n {
		t.Errorf("%d distinct messages handled, want %d", got, n)
	}
	if got := a.count(`SELECT count(*) FROM ` + a.table); got != n {
		t.Errorf("%d effects committed for %d messages", got, n)
	}
}
