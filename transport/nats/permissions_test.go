package natstransport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// serverConf is a JetStream server of one account; %s are its users.
const serverConf = `
listen: 127.0.0.1:-1
ports_file_dir: %q
jetstream { store_dir: %q }
accounts { A { jetstream: enabled, users: [ {user: admin, password: admin}, %s ] } }
`

// permissionsServer is a nats-server of the test's own, whose users'
// permissions the test sets.
type permissionsServer struct {
	t    *testing.T
	dir  string
	cmd  *exec.Cmd
	addr string // host:port
	log  bytes.Buffer
}

// startServer runs a nats-server with the users (besides admin, who may do
// anything) and stops it when the test ends. It skips the test when
// nats-server is not installed, or fails it when CI=true.
func startServer(t *testing.T, users string) *permissionsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		testenv.Unreachable(t, "the nats-server binary", testenv.NATSEnv, err)
	}
	s := &permissionsServer{t: t, dir: t.TempDir()}
	s.writeConf(users)
	s.cmd = exec.Command(bin, "-c", filepath.Join(s.dir, "server.conf"))
	s.cmd.Stderr = &s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	// The server writes its address once it listens.
	ports := filepath.Join(s.dir, fmt.Sprintf("%s_%d.ports", filepath.Base(bin), s.cmd.Process.Pid))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var p struct{ Nats []string }
		if b, err := os.ReadFile(ports); err == nil && json.Unmarshal(b, &p) == nil && len(p.Nats) > 0 {
			s.addr = p.Nats[0][len("nats://"):]
			return s
		}
		if time.Now().After(deadline) {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
			t.Fatalf("nats-server wrote no ports file %s within 10 s: %s", ports, s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *permissionsServer) writeConf(users string) {
	s.t.Helper()
	conf := fmt.Appendf(nil, serverConf, s.dir, filepath.Join(s.dir, "js"), users)
	if err := os.WriteFile(filepath.Join(s.dir, "server.conf"), conf, 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// reload gives the users new permissions, as an operator does.
func (s *permissionsServer) reload(users string) {
	s.t.Helper()
	s.writeConf(users)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		s.t.Fatal(err)
	}
}

// url is the server's URL for user, whose password is its name.
func (s *permissionsServer) url(user string) string {
	return "nats://" + user + ":" + user + "@" + s.addr
}

// stream creates a stream capturing "bt.>" on s.
func (s *permissionsServer) stream() jetstream.Stream {
	s.t.Helper()
	nc, err := nats.Connect(s.url("admin"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	st, err := js.CreateStream(ctxFor(s.t), jetstream.StreamConfig{Name: "BT", Subjects: []string{"bt.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// TestPublishTheUserMayNotMakeFailsAtOnce: the server answers a publish
// its user may not make (a permissions violation) with an asynchronous
// -ERR and nothing else. Deliver waited the whole Timeout for a PubAck and
// failed as a timeout, each message holding a worker that long, with an
// error that did not say what was wrong. It fails as soon as the server
// refuses, as the destination's fault (the credential's permissions are
// the destination's to fix, as a webhook's 403 is), and publishing to the
// subjects the user may use goes on.
func TestPublishTheUserMayNotMakeFailsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, `{user: relay, password: relay, permissions: {publish: {deny: ["bt.denied.>"]}}}`)
	st := s.stream()
	const timeout = 10 * time.Second
	tr := newTransport(t, natstransport.Config{URL: s.url("relay"), Subject: "bt.{type}", Timeout: timeout})
	ctx := ctxFor(t)
	for i := range 3 {
		m := message(t)
		m.Type = "denied.x"
		start := time.Now()
		err := tr.Deliver(ctx, m)
		took := time.Since(start)
		wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "permission_denied")
		if took >= timeout/2 {
			t.Fatalf("Deliver #%d took %v to report the refusal (Timeout %v)", i+1, took, timeout)
		}
	}
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver to a subject the user may publish to: %v", err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("the stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}

// TestPubAcksTheUserMayNotReceiveDoNotStoreEveryRetry: a user that may
// publish but not subscribe to the inboxes PubAcks come to. JetStream
// stores what it publishes and the PubAck never arrives: every Deliver
// timed out, and every retry of it stored another copy once the stream's
// duplicate window had passed (three Delivers of three messages stored
// three, each after the whole Timeout). Once the server refused the
// inbox, Deliver fails at once without publishing; when the operator
// grants the permission, the transport delivers again.
func TestPubAcksTheUserMayNotReceiveDoNotStoreEveryRetry(t *testing.T) {
	t.Parallel()
	s := startServer(t, `{user: relay, password: relay, permissions: {subscribe: {deny: ["_INBOX.>"]}}}`)
	st := s.stream()
	const timeout = 2 * time.Second
	tr := newTransport(t, natstransport.Config{URL: s.url("relay"), Subject: "bt.{type}", Timeout: timeout})
	ctx := ctxFor(t)
	for i := range 3 {
		start := time.Now()
		err := tr.Deliver(ctx, message(t))
		took := time.Since(start)
		wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "permission_denied")
		if took >= timeout/2 {
			t.Fatalf("Deliver #%d took %v to report the refusal (Timeout %v)", i+1, took, timeout)
		}
	}
	// The first message was published before the server refused the
	// inbox (the stream may not have stored it yet); the others were not.
	if info, err := st.Info(ctx); err != nil || info.State.Msgs > 1 {
		t.Fatalf("the stream holds %v messages after three failed Delivers (%v), want at most 1", info.State.Msgs, err)
	}

	s.reload(`{user: relay, password: relay}`)
	m := message(t)
	var err error
	for err = tr.Deliver(ctx, m); err != nil && ctx.Err() == nil; err = tr.Deliver(ctx, m) {
		time.Sleep(50 * time.Millisecond) // the server reloads, the transport reconnects
	}
	if err != nil {
		t.Fatalf("Deliver once the user may receive PubAcks: %v", err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("the stream holds %v messages (%v), want 2", info.State.Msgs, err)
	}
}
