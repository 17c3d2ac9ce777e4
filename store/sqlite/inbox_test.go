package sqlite_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

func TestInboxConformance(t *testing.T) {
	storetest.RunInbox(t, harness)
}
