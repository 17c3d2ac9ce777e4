package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// BenchmarkDeliver: signed deliveries of a 200-byte payload to a local
// receiver that reads the body and answers 204, eight at a time over
// kept-alive HTTP/1.1 connections.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	tr, err := webhook.New(webhook.Config{URL: srv.URL, Secret: []byte("bench-secret")})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	payload := make([]byte, 200)
	for i := range payload {
		payload[i] = 'a'
	}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := &outbox.Message{ID: uuid.New(), Destination: "d", Type: "t", Payload: payload}
			if err := tr.Deliver(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
