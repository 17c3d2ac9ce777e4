package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestQuickstartDeliversEverythingOrDeadLettersIt(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"delivered         23",
		"dead-lettered     1",
		"order-2/7  reason=ValidationFailure attempts=1",
		"order violations  0",
		"retries           6",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
