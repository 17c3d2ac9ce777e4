// Package scenario holds the benchmark scenarios (enqueue, drain,
// insert-and-work, latency) and the contract every system under test
// implements, so that Backstop, River and the raw SQL baselines are driven
// by the same code and checked by the same handler.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// Env says where a case runs: a fresh PostgreSQL schema or a fresh SQLite
// directory. Each case gets its own, so no state is shared between cases.
type Env struct {
	// Store is "postgres" or "sqlite".
	Store string
	// URL is the PostgreSQL connection string (Store "postgres").
	URL string
	// Schema is the PostgreSQL schema the case creates and works in.
	Schema string
	// Dir is the directory of the SQLite file (Store "sqlite").
	Dir string
	// Logger, when not nil, receives the logs of the system under test
	// (Backstop's store and relay); nil means slog.Default().
	Logger *slog.Logger
}

// The stores a case can run on.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Msg is one benchmark message.
type Msg struct {
	// N numbers the message uniquely within a case, from 0.
	N int64
	// Stream is the message's ordering key, or -1 for none.
	Stream int64
	// T is when its enqueue began, in Unix nanoseconds.
	T int64
}

// StreamKey is the stream name a system stores for m, or "" for none.
func (m Msg) StreamKey() string {
	if m.Stream < 0 {
		return ""
	}
	return "s" + strconv.FormatInt(m.Stream, 10)
}

// Payload encodes m as the JSON object {"n":N,"s":S,"t":T}, the body
// every system stores.
func (m Msg) Payload() []byte {
	b := make([]byte, 0, 64)
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, m.N, 10)
	b = append(b, `,"s":`...)
	b = strconv.AppendInt(b, m.Stream, 10)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, m.T, 10)
	return append(b, '}')
}

// ParsePayload decodes what Payload encoded.
func ParsePayload(b []byte) (Msg, error) {
	var m Msg
	fields := []*int64{&m.N, &m.Stream, &m.T}
	i := 0
	for f := 0; f < len(fields); f++ {
		for i < len(b) && b[i] != ':' {
			i++
		}
		j := i + 1
		for j < len(b) && b[j] != ',' && b[j] != '}' {
			j++
		}
		if i >= len(b) {
			return m, fmt.Errorf("scenario: bad payload %q", b)
		}
		v, err := strconv.ParseInt(string(b[i+1:j]), 10, 64)
		if err != nil {
			return m, fmt.Errorf("scenario: bad payload %q: %w", b, err)
		}
		*fields[f] = v
		i = j
	}
	return m, nil
}

// Handler is what a system's workers call for every delivery attempt of a
// message. A nil error means the message is done; ErrTransient asks the
// system to try it again later, by its own retry rules.
type Handler func(ctx context.Context, m Msg) error

// ErrTransient is the error a Handler returns for an attempt it fails on
// purpose. Systems map it to their own notion of a retryable failure.
var ErrTransient = errors.New("bench: deliberate transient failure")

// System is one queue implementation under test, opened on a fresh
// database by its package's Open. The scenarios call Insert and Preload
// from several goroutines at once, Start once, then Stop and Close.
type System interface {
	// Insert writes msgs in one transaction: one row when len(msgs) is 1,
	// otherwise a batch, each the way the system's users would write it.
	Insert(ctx context.Context, msgs []Msg) error
	// Preload writes msgs as fast as the system allows; it is not timed.
	Preload(ctx context.Context, msgs []Msg) error
	// Start starts the system's workers, which call h for every attempt.
	Start(ctx context.Context, h Handler) error
	// Completed is how many messages the system has recorded as done
	// (deleted, marked published, completed): not merely handled.
	Completed() int64
	// Stop stops the workers and waits for them.
	Stop(ctx context.Context) error
	// Close releases the database.
	Close() error
}
