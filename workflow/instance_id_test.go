package workflow_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/workflow"
)

// An instance ID is written in every run's lease and every attempt
// (owner). One with a NUL or invalid UTF-8 was taken by NewEngine: on
// SQLite the engine worked, and on PostgreSQL, which keeps no such text,
// every Run, Start and Resume failed with 'create run "r": ERROR: invalid
// byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)', which named
// neither the instance ID nor the configuration. NewEngine refuses it,
// naming the field, as it refuses such DAG, task and run IDs.
func TestNewEngineRefusesAnInstanceIDNoStoreKeeps(t *testing.T) {
	t.Parallel()
	_, ws := openSQLite(t, ":memory:")
	for _, id := range []string{"node\x00a", "node\xffb"} {
		if _, err := workflow.NewEngine(ws, workflow.Config{InstanceID: id}); err == nil ||
			!strings.Contains(err.Error(), "Config.InstanceID") {
			t.Errorf("NewEngine(InstanceID %q) = %v, want an error naming Config.InstanceID", id, err)
		}
	}
	for _, id := range []string{"node-1", "nœud\t7", strings.Repeat("n", 300)} {
		if _, err := workflow.NewEngine(ws, workflow.Config{InstanceID: id}); err != nil {
			t.Errorf("NewEngine(InstanceID %q) = %v", id, err)
		}
	}
}
