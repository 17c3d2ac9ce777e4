package natstransport

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstophq/backstop/internal/testenv"
)

// lockedBuffer is a bytes.Buffer safe for the connection's goroutines;
// seen is closed on the first write that holds want.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bytes.Contains(p, []byte(l.want)) {
		l.once.Do(func() { close(l.seen) })
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAsynchronousErrorsGoToTheLogger: what the connection the transport
// dials reports outside a publish goes to Config.Logger (nats.go prints it
// on stderr otherwise, out of the operator's logs). A subscription on the
// transport's own connection that cannot keep up provokes such an error
// (a slow consumer) on a healthy server.
func TestAsynchronousErrorsGoToTheLogger(t *testing.T) {
	logs := &lockedBuffer{want: "asynchronous error", seen: make(chan struct{})}
	tr, err := New(Config{URL: testenv.NATSURL(), Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		testenv.Unreachable(t, "NATS at "+testenv.NATSURL(), testenv.NATSEnv, err)
		return
	}
	defer tr.Close()
	block := make(chan struct{})
	defer close(block)
	subject := "backstop.test.slow." + strings.ReplaceAll(t.Name(), "/", "_")
	sub, err := tr.nc.Subscribe(subject, func(*nats.Msg) { <-block })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := tr.nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("no asynchronous error logged; logs:\n%s", logs)
	}
	if out := logs.String(); !strings.Contains(out, "slow consumer") || !strings.Contains(out, "subject="+subject) {
		t.Errorf("log does not name the error and subject:\n%s", out)
	}
}
