package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestListenerThatDiedLeavesNoRegistration: Listen registers in
// <prefix>waiters while it listens, and every insert into the outbox
// sends a NOTIFY while anyone is registered (migration 0010: notifying
// writers commit one at a time). A Listen caller whose process dies
// (kill -9, OOM, a container stopped) never ends its registration, and
// nothing else did: the reaper drops only the registrations of relay
// instances declared dead, and a Listen registration is no instance. So
// every insert notified for good after one such crash. The reaper must
// drop a listener's registration once its connection is gone, and keep
// that of a listener still connected.
func TestListenerThatDiedLeavesNoRegistration(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sp string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&sp); err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("listener-%d", time.Now().UnixNano())
	listener, err := New(schemaPoolWith(t, sp, 2, map[string]string{"application_name": app}), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	live, err := New(schemaPool(t, sp, 2), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	ch, err := listener.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	liveCh, err := live.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	waiters := func() int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.n.qual+"waiters").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := waiters(); n != 2 {
		t.Fatalf("%d registrations for two listeners", n)
	}

	// The listener's process dies: its pool is gone and its listening
	// connection ends.
	listener.pool.Close()
	// The listening backend is the one its registration names: the pool's
	// other connection, just closed, may still show in pg_stat_activity
	// for a moment while its backend exits.
	var pids []int
	rows, err := s.pool.Query(ctx, `SELECT a.pid FROM pg_stat_activity a WHERE a.application_name = $1
		AND EXISTS (SELECT 1 FROM `+s.n.qual+`waiters w WHERE w.id LIKE 'listen:' || a.pid || ':%')`, app)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil || len(pids) != 1 {
		t.Fatalf("listening backends %v, %v; want one", pids, err)
	}
	// (returns once the backend is gone)
	var gone bool
	if err := s.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pids[0]).Scan(&gone); err != nil || !gone {
		t.Fatalf("terminate the listening backend: %v, %v", gone, err)
	}
	for range ch { // closed once the listener saw its connection end
	}
	if n := waiters(); n != 2 {
		t.Fatalf("%d registrations after the crash, want the dead listener's left behind and the live one's", n)
	}

	if _, err := s.ReapDeadInstances(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	if n := waiters(); n != 1 {
		t.Fatalf("%d registrations after the reaper ran, want only the live listener's: a dead listener's registration makes every insert notify for good", n)
	}
	lcancel()
	for range liveCh {
	}
}
