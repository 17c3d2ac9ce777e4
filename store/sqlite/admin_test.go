package sqlite_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

func TestAdminConformance(t *testing.T) {
	storetest.RunAdmin(t, harness)
}
