package sqlite_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

func TestFleetConformance(t *testing.T) {
	storetest.RunFleet(t, harness)
}
