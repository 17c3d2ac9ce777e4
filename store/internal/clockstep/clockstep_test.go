package clockstep

import (
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	var w Watch
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if !w.Back(t0) {
		t.Error("the first reading is not taken as a step")
	}
	if w.Back(t0.Add(time.Second)) {
		t.Error("a reading a second on is taken as a step back")
	}
	if w.Back(t0.Add(time.Hour)) {
		t.Error("a step forward is taken as a step back")
	}
	if w.Back(t0.Add(time.Hour - Slack/2)) {
		t.Error("a reading within the slack is taken as a step back")
	}
	if !w.Back(t0) {
		t.Error("a step back an hour is not seen")
	}
	if w.Back(t0) {
		t.Error("the same reading again is taken as another step")
	}
}
