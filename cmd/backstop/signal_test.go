package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second SIGTERM (or SIGINT: a second Ctrl-C) ends serve at once, while
// its graceful stop waits for a delivery that does not return
// (shutdown_timeout 2m): it waited out the whole shutdown_timeout. SIGTERM
// here, since a process started in the background by a shell that has no
// job control ignores SIGINT, and passes that on.
func TestSecondSignalEndsServeAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "backstop")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	arrived, hold := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	db := "sqlite:" + filepath.Join(dir, "b.db")
	cfgPath := filepath.Join(dir, "backstop.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\ndb: %s\nrelay: {poll_interval: 20ms, shutdown_timeout: 2m}\n"+
		"destinations:\n  - {name: orders, type: webhook, url: %s, timeout: 5m}\n", db, srv.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "enqueue", "--db", db, "--destination", "orders", "--type", "t").CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	shutting := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "backstop shutting down") {
				close(shutting)
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-arrived: // the delivery is in flight, and will not return
	case <-time.After(60 * time.Second):
		t.Fatal("the delivery never arrived")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-shutting:
	case err := <-done:
		t.Fatalf("serve ended on the first SIGTERM (%v) with a delivery in flight and 2m to finish it", err)
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start shutting down")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Fatalf("serve after the second SIGTERM: %v, want ended by the signal", err)
		}
	case <-time.After(60 * time.Second): // the graceful stop would take 2m
		t.Fatal("serve did not end on the second SIGTERM")
	}
}
