package wfsqlite_test

import (
	"testing"

	"github.com/backstophq/backstop/workflow/wfstore/wfstoretest"
)

// BenchmarkRenewalRead: see wfstoretest.BenchRenewalRead.
func BenchmarkRenewalRead(b *testing.B) {
	_, ws := open(b, ":memory:", "")
	wfstoretest.BenchRenewalRead(b, ws)
}
