package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dashboard"
)

// serveAdmin serves the admin API and /metrics on the demo's store until
// ctx is done, with a fresh operate token. The relay keeps running, so
// replays are delivered.
func (d *demoRun) serveAdmin(ctx context.Context, out io.Writer) error {
	ln, err := net.Listen("tcp", d.o.listen)
	if err != nil && d.o.listen == defaultDemoListen {
		ln, err = net.Listen("tcp", "127.0.0.1:0") // 8080 is taken: any port
	}
	if err != nil {
		return err
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := "demo-" + hex.EncodeToString(b)
	api, err := admin.New(admin.Config{
		Store:        d.st,
		Tokens:       []admin.Token{{Name: "demo", Secret: token, Role: admin.RoleOperate}},
		Destinations: demoDestinations,
		Breakers:     admin.RelayBreakers(d.relay),
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", dashboard.Handler()) // the web dashboard, a client of the API
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	url := "http://" + ln.Addr().String()
	stream := demoStream("orders", 3%d.o.streams)
	fmt.Fprintf(out, `
admin API  %[1]s/v1  (token %[2]s; OpenAPI at /v1/openapi.json, metrics at /metrics)
dashboard  %[1]s/  (sign in with the token)
try, in another terminal:
  export BACKSTOP_SERVER=%[1]s BACKSTOP_TOKEN=%[2]s
  go run ./cmd/backstop dlq list
  go run ./cmd/backstop streams show orders %[3]s
  go run ./cmd/backstop dlq replay --destination billing --dry-run
  curl -H "Authorization: Bearer $BACKSTOP_TOKEN" %[1]s/v1/stats
serving until Ctrl-C
`, url, token, stream)
	if d.o.ready != nil {
		d.o.ready(url, token)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
