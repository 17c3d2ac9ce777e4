package sqlite

import (
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/storetest"
)

// TestClaimNamingManyDestinations: a claim naming 1,000 destinations, five
// of them busy, finds their work and takes none of a destination it did not
// name (storetest.ManyNamedDestinations). It read every destination it
// named, two queries each: about 40 times the claim naming the five
// (BenchmarkClaimOverManyIdleDestinations reports the ratio).
func TestClaimNamingManyDestinations(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
	busy, wide := storetest.ManyNamedDestinations(t, s)
	t.Logf("claim naming 5 destinations: %v; naming 1,000: %v (%.1fx)", busy, wide, float64(wide)/float64(busy))
}

// BenchmarkClaimOverManyIdleDestinations reports a claim naming 1,000
// destinations, five busy, as a multiple of the claim naming the five
// (x_busy; about 1 now, about 40 before).
func BenchmarkClaimOverManyIdleDestinations(b *testing.B) {
	for range b.N {
		s, _ := openTemp(b, store.Config{})
		busy, wide := storetest.ManyNamedDestinations(b, s)
		b.ReportMetric(float64(wide)/float64(busy), "x_busy")
	}
}
