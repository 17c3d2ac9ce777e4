package store_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/store"
)

func TestHubCoalescesAndUnsubscribes(t *testing.T) {
	var h store.Hub
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.Notify()
	h.Notify() // coalesced with the first
	<-ch
	select {
	case <-ch:
		t.Fatal("two wake-ups for two notifications; want them coalesced")
	default:
	}
	cancel()
	for range ch { // closed once ctx is done
	}
	h.Notify() // no subscriber left; must not block or panic
}
