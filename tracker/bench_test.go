package tracker_test

import (
	"strconv"
	"testing"

	"github.com/backstophq/backstop/tracker"
)

// BenchmarkTryProceedHealthy is the fast path: a healthy context asks
// whether it may go ahead and records a success.
func BenchmarkTryProceedHealthy(b *testing.B) {
	t := tracker.New(tracker.Config{Name: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := t.TryProceed(); !ok {
			b.Fatal("healthy tracker refused")
		}
		t.Success()
	}
}

// BenchmarkRegistryGet looks up an existing tracker in a full registry.
func BenchmarkRegistryGet(b *testing.B) {
	r := tracker.NewRegistry(tracker.RegistryConfig{MaxEntries: 1024})
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "dest-" + strconv.Itoa(i)
		r.Get(keys[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Get(keys[i&1023])
		i++
	}
}
