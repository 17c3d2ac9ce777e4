package main

import (
	"net"
	"strings"
	"testing"
)

// TestCLIGivesUpOnASilentServer: `backstop ... --server URL` against a
// server that takes the connection and never answers ends after --timeout
// with an error that says the server did not answer in time and names
// the flag. It hung for ever, with no line of output.
func TestCLIGivesUpOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { close(done); ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-done // held open, never answered
			}()
		}
	}()
	server := "--server=http://" + ln.Addr().String()
	for _, args := range [][]string{
		{"dlq", "list"},
		{"dlq", "replay", "--all"},
		{"stats"},
	} {
		out, err := cli(t, append([]string{server, "--timeout=300ms"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "did not answer within 300ms") || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("backstop %s against a silent server: %v\n%s\nwant it to say the server did not answer in time, naming --timeout", strings.Join(args, " "), err, out)
		}
	}
	if _, err := cli(t, server, "--timeout=-1s", "stats"); err == nil || !strings.Contains(err.Error(), "--timeout") {
		t.Errorf("a negative --timeout: %v, want it refused naming the flag", err)
	}
}
