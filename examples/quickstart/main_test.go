package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestQuickstartDeliversEverythingInOrderOrDeadLettersIt(t *testing.T) {
	var out, logs bytes.Buffer
	if err := run(context.Background(), &out, &logs); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), logs.String())
	}
	for _, want := range []string{
		"delivered         23 (webhook accepted 23, signatures verified)",
		"(6 answered 503, 1 answered 400)",
		"dead-lettered     1",
		"order-2 step 8  reason=ValidationFailure attempts=1",
		"order violations  0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(logs.String(), `msg="message failed permanently"`) {
		t.Errorf("the operations log lacks the permanent failure:\n%s", logs.String())
	}
}
