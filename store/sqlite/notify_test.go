package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

func TestSubscribeWakesOnEnqueueAndRetryNow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "notify.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var _ store.Notifier = s
	wake, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Fatal("woken before anything happened")
	default:
	}
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-wake; !ok {
		t.Fatal("no wake-up after Enqueue")
	}
	if err := s.RetryNow(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-wake; !ok {
		t.Fatal("no wake-up after RetryNow")
	}
	cancel()
	for range wake { // closed when ctx is done
	}
}
