package wfpostgres_test

import (
	"testing"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/wfstore/wfstoretest"
)

// BenchmarkRenewalRead: see wfstoretest.BenchRenewalRead.
func BenchmarkRenewalRead(b *testing.B) {
	_, ws, _ := open(b, store.Config{Clock: clock.Real})
	wfstoretest.BenchRenewalRead(b, ws)
}
