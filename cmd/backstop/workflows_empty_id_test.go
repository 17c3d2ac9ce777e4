package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// workflows runs show with an empty ID (an unset shell variable: show
// "$RUN") said "no such route: GET /v1/workflows/runs/ is not part of the
// API", blaming the API. It now says the ID is empty and where IDs are.
func TestWorkflowsShowRefusesAnEmptyID(t *testing.T) {
	db := "--db=sqlite:" + filepath.Join(t.TempDir(), "b.db")
	out, err := cli(t, db, "workflows", "runs", "show", "")
	if err == nil || !strings.Contains(err.Error(), "the run ID is empty") ||
		!strings.Contains(err.Error(), "backstop workflows runs list") || strings.Contains(err.Error(), "route") {
		t.Errorf("show of an empty ID: %v\n%s", err, out)
	}
}
