package postgres

import (
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/storetest"
)

// TestClaimNamingManyDestinations: a claim naming 1,000 destinations, five
// of them busy, finds their work and takes none of a destination it did not
// name (storetest.ManyNamedDestinations). Before migration 0028 it read
// every destination it named: 10 to 15 times the claim naming the five
// (BenchmarkClaimOverManyIdleDestinations reports the ratio).
func TestClaimNamingManyDestinations(t *testing.T) {
	t.Parallel()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	busy, wide := storetest.ManyNamedDestinations(t, s)
	t.Logf("claim naming 5 destinations: %v; naming 1,000: %v (%.1fx)", busy, wide, float64(wide)/float64(busy))
}

// BenchmarkClaimOverManyIdleDestinations reports a claim naming 1,000
// destinations, five busy, as a multiple of the claim naming the five
// (x_busy; about 1 since migration 0028, 10-15 before).
func BenchmarkClaimOverManyIdleDestinations(b *testing.B) {
	for range b.N {
		s, err := openTest(b, store.Config{})
		if err != nil {
			b.Fatal(err)
		}
		busy, wide := storetest.ManyNamedDestinations(b, s)
		b.ReportMetric(float64(wide)/float64(busy), "x_busy")
	}
}
