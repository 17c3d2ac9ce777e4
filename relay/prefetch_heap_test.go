package relay

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// TestMessageBytesCoverHeadersAtTheirLimit: what the relay counts against
// PrefetchBytes for a message must be at least the memory it takes. With
// outbox.DefaultMaxHeaders headers adding up to DefaultMaxHeaderBytes,
// counting only their names and values left out the map and the strings'
// own overhead, and the relay held 1.43 times PrefetchBytes of such
// messages (BenchmarkPrefetchHeap/headers-at-limit). Not parallel: it
// reads the heap.
func TestMessageBytesCoverHeadersAtTheirLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers int
		bytes   int
		payload int
	}{
		{"64 headers of 16 KiB", outbox.DefaultMaxHeaders, outbox.DefaultMaxHeaderBytes, 1024},
		{"64 short headers", outbox.DefaultMaxHeaders, outbox.DefaultMaxHeaders * 8, 16},
		{"one header", 1, 16, 16},
		{"no headers", 0, 0, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2000
			before := liveHeap()
			msgs := make([]*outbox.Message, n)
			var counted int64
			for i := range msgs {
				m := &outbox.Message{
					ID: uuid.New(), Destination: strings.Repeat("d", 8), Stream: fmt.Sprintf("stream-%d", i),
					Type: strings.Repeat("t", 12), Payload: make([]byte, tc.payload),
				}
				if tc.headers > 0 {
					m.Headers = make(map[string]string)
					each := tc.bytes / tc.headers
					for h := range tc.headers {
						name := fmt.Sprintf("x-h%02d", h)
						m.Headers[name] = strings.Repeat("v", each-len(name))
					}
				}
				msgs[i] = m
				counted += messageBytes(m)
			}
			used := liveHeap() - before
			runtime.KeepAlive(msgs)
			if used > counted {
				t.Fatalf("%d messages take %d bytes of heap and count %d against PrefetchBytes (%.2f×)",
					n, used, counted, float64(used)/float64(counted))
			}
			t.Logf("heap %d, counted %d (%.2f×)", used, counted, float64(used)/float64(counted))
		})
	}
}
