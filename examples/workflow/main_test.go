package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestExampleRunsFailsRepairsAndWritesEachMessageOnce(t *testing.T) {
	var out, logs bytes.Buffer
	if err := run(context.Background(), &out, &logs); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), logs.String())
	}
	for _, want := range []string{
		"run order-1001 of DAG fulfilment: failed",
		"why: task ship failed under allow_partial; task notify did not run; critical task ship did not succeed",
		"charge     success          succeeded on attempt 3",
		"ship       failed           failed: carrier: postcode 9999 does not exist (attempt 1; permanent error, not retried); dead letter ",
		"notify     upstream_failed  skipped: upstream task ship failed under allow_partial",
		"analytics  success          succeeded on attempt 1",
		"run order-1001 of DAG fulfilment: success",
		"ship       success  succeeded on attempt 2, replayed from the dead-letter queue",
		"attempts: 1 failed (carrier: postcode 9999 does not exist); 2 success",
		"outbox: 5 messages",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(logs.String(), `msg="task dead-lettered"`) {
		t.Errorf("the operations log lacks the dead letter:\n%s", logs.String())
	}
}
