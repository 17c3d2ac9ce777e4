package webhook_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

// A destination that answers with megabytes of tiny headers: the
// transport's own client took Go's default bound (10 MiB of header
// bytes), and parsing 10 MiB of "X: y" lines costs about 90 MB of heap,
// per delivery: the relay's 16 default workers delivering to one such
// receiver held well over a gigabyte. The answer's headers must be
// bounded like its status line, Location and body.
func TestHugeResponseHeadersAreBounded(t *testing.T) {
	hdr := strings.Repeat("X: y\r\n", (10<<20)/6-100) // just under Go's default bound
	answer := "HTTP/1.1 500 Internal Server Error\r\n" + hdr + "Content-Length: 0\r\n\r\n"
	url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, answer)
	})
	tr, err := webhook.New(webhook.Config{URL: url, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err = tr.Deliver(context.Background(), message())
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("Deliver = nil for a 500")
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination {
		t.Fatalf("verdict %s/%s for %v, want a transient fault of the destination", v.Class, v.Blame, err)
	}
	const most = 32 << 20
	if got := after.TotalAlloc - before.TotalAlloc; got > most {
		t.Fatalf("one delivery answered with 10 MiB of headers allocated %d MiB (want at most %d MiB): %v", got>>20, most>>20, err)
	}
}
