package errorhandling_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
)

// statusError is a client library's error that reports an HTTP status.
type statusError struct{ code int }

func (e *statusError) Error() string       { return fmt.Sprintf("upstream answered %d", e.code) }
func (e *statusError) HTTPStatusCode() int { return e.code }

// pgError stands in for pgx's *pgconn.PgError.
type pgError struct{ state string }

func (e *pgError) Error() string    { return "ERROR: something (SQLSTATE " + e.state + ")" }
func (e *pgError) SQLState() string { return e.state }

// fakeNetError is a net.Error that is not from package net.
type fakeNetError struct{ timeout bool }

func (e fakeNetError) Error() string   { return "fake network error" }
func (e fakeNetError) Timeout() bool   { return e.timeout }
func (e fakeNetError) Temporary() bool { return false }

// want is the expected verdict. Rule "*" skips the rule check.
type want struct {
	class  eh.Class
	retry  bool
	blame  eh.Blame
	reason eh.FailureReason
	code   string
	rule   string
}

func (w want) check(t *testing.T, c *eh.ErrorClassifier, err error) {
	t.Helper()
	got := c.Classify(err)
	if got.Class != w.class || got.Retryable != w.retry || got.Blame != w.blame ||
		got.Reason != w.reason || got.Code != w.code || (w.rule != "*" && got.Rule != w.rule) {
		t.Errorf("Classify(%v) = {%v retry=%v %v %v code=%q rule=%q}, want {%v retry=%v %v %v code=%q rule=%q}",
			err, got.Class, got.Retryable, got.Blame, got.Reason, got.Code, got.Rule,
			w.class, w.retry, w.blame, w.reason, w.code, w.rule)
	}
}

var (
	dest, msg = eh.BlameDestination, eh.BlameMessage
	perm      = eh.ClassPermanent
	trans     = eh.ClassTransient
)

func transientDest(reason eh.FailureReason, code, rule string) want {
	return want{trans, true, dest, reason, code, rule}
}

func permanentMsg(reason eh.FailureReason, code, rule string) want {
	return want{perm, false, msg, reason, code, rule}
}

func TestClassifyBuiltin(t *testing.T) {
	t.Parallel()
	var syntaxErr, typeErr error
	var v struct{ N int }
	syntaxErr = json.Unmarshal([]byte(`{"n": `), &v)
	typeErr = json.Unmarshal([]byte(`{"N": "x"}`), &v)
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

	tests := []struct {
		name string
		err  error
		want want
	}{
		{"deadline", context.DeadlineExceeded, transientDest(eh.ReasonTimeoutExceeded, "timeout", "context")},
		{"deadline wrapped", fmt.Errorf("send: %w", context.DeadlineExceeded), transientDest(eh.ReasonTimeoutExceeded, "timeout", "context")},
		{"canceled", context.Canceled, transientDest(eh.ReasonTransportUnavailable, "canceled", "context")},
		{"net timeout", fakeNetError{timeout: true}, transientDest(eh.ReasonTimeoutExceeded, "timeout", "network")},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), transientDest(eh.ReasonTimeoutExceeded, "timeout", "network")},
		{"econnreset", reset, transientDest(eh.ReasonTransportUnavailable, "network", "network")},
		{"econnreset wrapped", fmt.Errorf("post: %w", reset), transientDest(eh.ReasonTransportUnavailable, "network", "network")},
		{"etimedout", os.NewSyscallError("connect", syscall.ETIMEDOUT), transientDest(eh.ReasonTimeoutExceeded, "timeout", "network")},
		{"unexpected eof", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), transientDest(eh.ReasonTransportUnavailable, "network", "network")},
		{"dns", &net.DNSError{Err: "no such host", Name: "x.invalid"}, transientDest(eh.ReasonTransportUnavailable, "network", "network")},
		{"json syntax", syntaxErr, permanentMsg(eh.ReasonSerializationError, "", "json")},
		{"json type", fmt.Errorf("decode: %w", typeErr), permanentMsg(eh.ReasonSerializationError, "", "json")},
		{"status 200 falls through", eh.WithHTTPStatus(syntaxErr, 200), permanentMsg(eh.ReasonSerializationError, "http_200", "json")},
		{"status 101 falls through", eh.WithHTTPStatus(errors.New("switching"), 101), want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "http_101", ""}},
		{"status 600 falls through", eh.WithHTTPStatus(errors.New("odd"), 600), want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "http_600", ""}},
		{"reason validation", eh.WithReason(errors.New("bad"), eh.ReasonValidationFailure), permanentMsg(eh.ReasonValidationFailure, "", "reason")},
		{"reason dependency", eh.WithReason(errors.New("down"), eh.ReasonDependencyFailure), transientDest(eh.ReasonDependencyFailure, "", "reason")},
		{"reason handler", eh.WithReason(errors.New("?"), eh.ReasonHandlerException), want{eh.ClassUnknown, false, msg, eh.ReasonHandlerException, "", ""}},
		{"code timeout", eh.WithCode(errors.New("slow"), "timeout"), transientDest(eh.ReasonTimeoutExceeded, "timeout", "code")},
		{"code rate_limit", eh.WithCode(errors.New("slow down"), "rate_limit"), transientDest(eh.ReasonTransportUnavailable, "rate_limit", "code")},
		{"code not retryable", eh.WithCode(errors.New("odd"), "odd"), want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "odd", ""}},
		{"unknown", errors.New("boom"), want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "", ""}},
	}
	c := eh.NewErrorClassifier()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.want.check(t, c, tt.err)
		})
	}
}

func TestClassifyHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   want
	}{
		{300, transientDest(eh.ReasonTransportUnavailable, "http_300", "http_status")},
		{301, transientDest(eh.ReasonTransportUnavailable, "http_301", "http_status")},
		{308, transientDest(eh.ReasonTransportUnavailable, "http_308", "http_status")},
		{400, permanentMsg(eh.ReasonValidationFailure, "http_400", "http_status")},
		{401, transientDest(eh.ReasonDependencyFailure, "unauthorized", "http_status")},
		{402, permanentMsg(eh.ReasonValidationFailure, "http_402", "http_status")},
		{403, transientDest(eh.ReasonDependencyFailure, "forbidden", "http_status")},
		{404, transientDest(eh.ReasonDependencyFailure, "not_found", "http_status")},
		{405, transientDest(eh.ReasonDependencyFailure, "method_not_allowed", "http_status")},
		{406, permanentMsg(eh.ReasonValidationFailure, "http_406", "http_status")},
		{407, transientDest(eh.ReasonDependencyFailure, "proxy_auth_required", "http_status")},
		{408, transientDest(eh.ReasonTimeoutExceeded, "timeout", "http_status")},
		{409, permanentMsg(eh.ReasonValidationFailure, "http_409", "http_status")},
		{410, transientDest(eh.ReasonDependencyFailure, "gone", "http_status")},
		{413, permanentMsg(eh.ReasonValidationFailure, "http_413", "http_status")},
		{415, permanentMsg(eh.ReasonValidationFailure, "http_415", "http_status")},
		{421, transientDest(eh.ReasonDependencyFailure, "misdirected_request", "http_status")},
		{422, permanentMsg(eh.ReasonValidationFailure, "http_422", "http_status")},
		{423, transientDest(eh.ReasonTransportUnavailable, "http_423", "http_status")},
		{425, transientDest(eh.ReasonTransportUnavailable, "http_425", "http_status")},
		{426, transientDest(eh.ReasonDependencyFailure, "upgrade_required", "http_status")},
		{429, transientDest(eh.ReasonTransportUnavailable, "rate_limit", "http_status")},
		{451, permanentMsg(eh.ReasonValidationFailure, "http_451", "http_status")},
		{499, permanentMsg(eh.ReasonValidationFailure, "http_499", "http_status")},
		{500, transientDest(eh.ReasonTransportUnavailable, "http_500", "http_status")},
		{502, transientDest(eh.ReasonTransportUnavailable, "http_502", "http_status")},
		{503, transientDest(eh.ReasonTransportUnavailable, "service_unavailable", "http_status")},
		{504, transientDest(eh.ReasonTimeoutExceeded, "timeout", "http_status")},
		{599, transientDest(eh.ReasonTransportUnavailable, "http_599", "http_status")},
	}
	c := eh.NewErrorClassifier()
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			base := errors.New("request failed")
			tt.want.check(t, c, eh.WithHTTPStatus(base, tt.status))
			tt.want.check(t, c, fmt.Errorf("deliver: %w", eh.WithHTTPStatus(base, tt.status)))
			tt.want.check(t, c, &statusError{code: tt.status})
			tt.want.check(t, c, fmt.Errorf("a: %w", fmt.Errorf("b: %w", &statusError{code: tt.status})))
		})
	}
}

func TestClassifySQLState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state string
		want  want
	}{
		{"40001", transientDest(eh.ReasonDependencyFailure, "sqlstate_40001", "sqlstate")},
		{"40P01", transientDest(eh.ReasonDependencyFailure, "sqlstate_40P01", "sqlstate")},
		{"08006", transientDest(eh.ReasonDependencyFailure, "sqlstate_08006", "sqlstate")},
		{"53300", transientDest(eh.ReasonDependencyFailure, "sqlstate_53300", "sqlstate")},
		{"57P01", transientDest(eh.ReasonDependencyFailure, "sqlstate_57P01", "sqlstate")},
		{"23505", permanentMsg(eh.ReasonValidationFailure, "sqlstate_23505", "sqlstate")},
		{"23503", permanentMsg(eh.ReasonValidationFailure, "sqlstate_23503", "sqlstate")},
		{"42601", permanentMsg(eh.ReasonValidationFailure, "sqlstate_42601", "sqlstate")},
		{"22P02", permanentMsg(eh.ReasonSerializationError, "sqlstate_22P02", "sqlstate")},
		{"XX000", want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "sqlstate_XX000", ""}},
	}
	c := eh.NewErrorClassifier()
	for _, tt := range tests {
		t.Run(tt.state, func(t *testing.T) {
			t.Parallel()
			tt.want.check(t, c, &pgError{state: tt.state})
			tt.want.check(t, c, fmt.Errorf("insert: %w", &pgError{state: tt.state}))
		})
	}
}

// TestClassifyRealNetwork uses errors from the operating system's network
// stack rather than hand-built ones.
func TestClassifyRealNetwork(t *testing.T) {
	t.Parallel()
	c := eh.NewErrorClassifier()

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", addr)
		if err == nil {
			conn.Close()
			t.Skip("port was reused before the dial")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v is not ECONNREFUSED", addr, err)
		}
		transientDest(eh.ReasonTransportUnavailable, "connection_refused", "network").check(t, c, err)
		if got := eh.NormalizeMessage(err.Error()); got != "dial tcp <addr>: connect: connection refused" {
			t.Errorf("NormalizeMessage(%q) = %q", err, got)
		}
	})

	t.Run("expired deadline", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		conn, err := (&net.Dialer{Deadline: time.Now().Add(-time.Second)}).Dial("tcp", ln.Addr().String())
		if err == nil {
			conn.Close()
			t.Fatal("dial with an expired deadline succeeded")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("dial error %v (%T) is not a net.Error timeout", err, err)
		}
		transientDest(eh.ReasonTimeoutExceeded, "timeout", "*").check(t, c, err)
	})
}
