package models_test

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
)

func TestTaskStates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s        models.TaskState
		name     string
		terminal bool
	}{
		{models.TaskStatePending, "pending", false},
		{models.TaskStateRunning, "running", false},
		{models.TaskStateUpForRetry, "up_for_retry", false},
		{models.TaskStateSuccess, "success", true},
		{models.TaskStateFailed, "failed", true},
		{models.TaskStateUpstreamFailed, "upstream_failed", true},
		{models.TaskStateSkipped, "skipped", true},
	}
	for _, tt := range tests {
		if string(tt.s) != tt.name || !tt.s.Valid() || tt.s.Terminal() != tt.terminal {
			t.Errorf("TaskState %q: valid=%v terminal=%v, want %q, true, %v", tt.s, tt.s.Valid(), tt.s.Terminal(), tt.name, tt.terminal)
		}
	}
	for _, s := range []models.TaskState{"", "done", "Failed"} {
		if s.Valid() || s.Terminal() {
			t.Errorf("TaskState(%q) valid or terminal", s)
		}
	}
}

func TestRunStates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s        models.RunState
		name     string
		terminal bool
	}{
		{models.RunStateRunning, "running", false},
		{models.RunStateSuccess, "success", true},
		{models.RunStateFailed, "failed", true},
		{models.RunStatePartialSuccess, "partial_success", true},
	}
	for _, tt := range tests {
		if string(tt.s) != tt.name || !tt.s.Valid() || tt.s.Terminal() != tt.terminal {
			t.Errorf("RunState %q: valid=%v terminal=%v, want %q, true, %v", tt.s, tt.s.Valid(), tt.s.Terminal(), tt.name, tt.terminal)
		}
	}
	for _, s := range []models.RunState{"", "partial", "pending"} {
		if s.Valid() || s.Terminal() || s.Succeeded() {
			t.Errorf("RunState(%q) valid, terminal or succeeded", s)
		}
	}
	for s, want := range map[models.RunState]bool{models.RunStateRunning: false, models.RunStateSuccess: true,
		models.RunStateFailed: false, models.RunStatePartialSuccess: true} {
		if s.Succeeded() != want {
			t.Errorf("RunState(%q).Succeeded() = %v", s, !want)
		}
	}
}

func TestDAGTask(t *testing.T) {
	t.Parallel()
	d := &models.DAG{ID: "etl", Name: "ETL", Tasks: []models.Task{
		{ID: "extract", DAGID: "etl"},
		{ID: "load", DAGID: "etl", Upstream: []string{"extract"}, Critical: true, Retries: 2},
	}}
	task, ok := d.Task("load")
	if !ok || task.ID != "load" || !task.Critical || task.Retries != 2 {
		t.Fatalf("Task(load) = %+v, %v", task, ok)
	}
	task.Retries = 5
	if d.Tasks[1].Retries != 5 {
		t.Error("Task returns a copy, want a pointer into Tasks")
	}
	if task, ok := d.Task("missing"); ok || task != nil {
		t.Errorf("Task(missing) = %+v, %v", task, ok)
	}
}

func TestTaskInstanceDuration(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		ti   models.TaskInstance
		want time.Duration
	}{
		{models.TaskInstance{}, 0},
		{models.TaskInstance{StartedAt: start}, 0},
		{models.TaskInstance{StartedAt: start, EndedAt: start.Add(1500 * time.Millisecond)}, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := tt.ti.Duration(); got != tt.want {
			t.Errorf("Duration() = %v, want %v", got, tt.want)
		}
	}
}
