package main

import (
	"strings"
	"testing"
)

// A mistyped subcommand of a command group (dlq, messages, streams,
// workflows, workflows runs, config) must fail: it printed the group's
// help and exited 0, so a script's `backstop dlq replya --all` passed.
func TestUnknownSubcommandFails(t *testing.T) {
	for _, args := range [][]string{
		{"dlq", "lsit"},
		{"messages", "lst"},
		{"streams", "relase", "s1"},
		{"workflows", "rns"},
		{"workflows", "runs", "lst"},
		{"config", "chekc", "x.yaml"},
	} {
		out, err := cli(t, args...)
		if err == nil {
			t.Errorf("backstop %s: no error (output %.60q)", strings.Join(args, " "), out)
			continue
		}
		if !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("backstop %s: %v", strings.Join(args, " "), err)
		}
	}
	// A group without a subcommand still shows its help.
	if out, err := cli(t, "dlq"); err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("backstop dlq: %v\n%s", err, out)
	}
}
