package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// valid returns a message that passes validation.
func valid() *outbox.Message {
	return &outbox.Message{
		Destination: "billing",
		Stream:      "order-42",
		Type:        "order.created",
		Payload:     []byte(`{"order":42}`),
		Headers:     map[string]string{"Content-Type": "application/json", "X-Note": "tab\tis fine"},
	}
}

// headersOf returns n headers, each with a value of size bytes.
func headersOf(n, size int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("X-H%03d", i)] = strings.Repeat("v", size)
	}
	return h
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(m *outbox.Message)
		want   string // the error's text after "outbox: invalid message: "; "" means valid
	}{
		{"valid", func(*outbox.Message) {}, ""},
		{"no stream", func(m *outbox.Message) { m.Stream = "" }, ""},
		{"no headers", func(m *outbox.Message) { m.Headers = nil }, ""},
		{"unicode everywhere", func(m *outbox.Message) {
			m.Destination, m.Stream, m.Type = "fakturering", "bestilling-æøå-日本", "ordre.opprettet"
			m.Headers = map[string]string{"X-Name": "Zoë 日本 \u2028 \u00a0"}
		}, ""},
		{"line separator U+2028 is not a control", func(m *outbox.Message) { m.Stream = "a\u2028b" }, ""},
		{"payload content is not looked at", func(m *outbox.Message) { m.Payload = []byte("\x00\xff\xfe") }, ""},
		{"payload at the limit", func(m *outbox.Message) { m.Payload = make([]byte, outbox.DefaultMaxPayloadBytes) }, ""},
		{"lengths at the limits", func(m *outbox.Message) {
			m.Destination, m.Stream, m.Type = strings.Repeat("d", 200), strings.Repeat("é", 100), strings.Repeat("t", 200)
		}, ""},
		{"headers at the limits", func(m *outbox.Message) { m.Headers = headersOf(64, 16<<10/64-6) }, ""},

		{"scheduled at the first and last times kept", func(m *outbox.Message) { m.ScheduledFor = outbox.MaxTime }, ""},
		{"scheduled at the year 1", func(m *outbox.Message) { m.ScheduledFor = outbox.MinTime }, ""},
		{"scheduled past the year 9999 in UTC", func(m *outbox.Message) {
			m.ScheduledFor = time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -3600))
		}, "scheduled_for is 10000-01-01T00:59:59Z, outside the years 1 to 9999 (UTC) a store keeps"},
		{"scheduled before the year 1", func(m *outbox.Message) {
			m.ScheduledFor = time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC)
		}, "scheduled_for is 0000-12-31T00:00:00Z, outside the years 1 to 9999 (UTC) a store keeps"},

		{"no destination", func(m *outbox.Message) { m.Destination = "" }, "destination is required"},
		{"no type", func(m *outbox.Message) { m.Type = "" }, "type is required"},
		{"newline in stream", func(m *outbox.Message) { m.Stream = "a\nb" }, "stream holds control character U+000A at byte 1"},
		{"NUL in destination", func(m *outbox.Message) { m.Destination = "bill\x00ing" }, "destination holds control character U+0000 at byte 4"},
		{"tab in type", func(m *outbox.Message) { m.Type = "order\tcreated" }, "type holds control character U+0009 at byte 5"},
		{"CR in stream", func(m *outbox.Message) { m.Stream = "\r" }, "stream holds control character U+000D at byte 0"},
		{"DEL in type", func(m *outbox.Message) { m.Type = "x\x7f" }, "type holds control character U+007F at byte 1"},
		{"C1 in stream", func(m *outbox.Message) { m.Stream = "é\u0085" }, "stream holds control character U+0085 at byte 2"},
		{"invalid UTF-8 in type", func(m *outbox.Message) { m.Type = "ok\xff" }, "type holds invalid UTF-8 (byte 0xFF) at byte 2"},
		{"overlong encoding", func(m *outbox.Message) { m.Stream = "\xc0\xaf" }, "stream holds invalid UTF-8 (byte 0xC0) at byte 0"},
		{"surrogate half", func(m *outbox.Message) { m.Stream = "\xed\xa0\x80" }, "stream holds invalid UTF-8 (byte 0xED) at byte 0"},
		{"long destination", func(m *outbox.Message) { m.Destination = strings.Repeat("d", 201) }, "destination is 201 bytes, over the limit of 200"},
		{"long stream in bytes", func(m *outbox.Message) { m.Stream = strings.Repeat("é", 101) }, "stream is 202 bytes, over the limit of 200"},
		{"huge type", func(m *outbox.Message) { m.Type = strings.Repeat("t\x00", 1<<20) }, "type is 2097152 bytes, over the limit of 200"},
		{"unknown ordering", func(m *outbox.Message) { m.Ordering = "sometimes" }, `ordering "sometimes" is unknown (want strict, release or none)`},
		{"big payload", func(m *outbox.Message) { m.Payload = make([]byte, outbox.DefaultMaxPayloadBytes+1) }, "payload is 1048577 bytes, over the limit of 1048576"},
		{"too many headers", func(m *outbox.Message) { m.Headers = headersOf(65, 1) }, "headers hold 65 entries, over the limit of 64"},
		{"headers too large", func(m *outbox.Message) { m.Headers = headersOf(2, 8<<10) }, "headers hold 16396 bytes of names and values, over the limit of 16384"},
		{"empty header name", func(m *outbox.Message) { m.Headers[""] = "v" }, "header name is empty"},
		{"space in header name", func(m *outbox.Message) { m.Headers["X Note"] = "v" }, `header name "X Note" is not an HTTP token: byte 0x20 at byte 1`},
		{"colon in header name", func(m *outbox.Message) { m.Headers["X-A:"] = "v" }, `header name "X-A:" is not an HTTP token: byte 0x3A at byte 3`},
		{"unicode header name", func(m *outbox.Message) { m.Headers["X-Zoë"] = "v" }, `header name "X-Zoë" is not an HTTP token: byte 0xC3 at byte 4`},
		{"CRLF injection", func(m *outbox.Message) { m.Headers["X-A"] = "v\r\nSet-Cookie: x" }, `header "X-A" value holds control character U+000D at byte 1`},
		{"NUL in header value", func(m *outbox.Message) { m.Headers["X-A"] = "\x00" }, `header "X-A" value holds control character U+0000 at byte 0`},
		{"C1 in header value", func(m *outbox.Message) { m.Headers["X-A"] = "\u009b31m" }, `header "X-A" value holds control character U+009B at byte 0`},
		{"invalid UTF-8 in header value", func(m *outbox.Message) { m.Headers["X-A"] = "caf\xe9" }, `header "X-A" value holds invalid UTF-8 (byte 0xE9) at byte 3`},
		{"smallest bad header name wins", func(m *outbox.Message) {
			m.Headers = map[string]string{"X-C": "\n", "X-B": "\x01", "X-D": "\x7f", "X-Ok": "fine"}
		}, `header "X-B" value holds control character U+0001 at byte 0`},
		{"long header name is shortened", func(m *outbox.Message) { m.Headers[strings.Repeat("n", 100)+" "] = "v" },
			`header name "` + strings.Repeat("n", 40) + `..." is not an HTTP token: byte 0x20 at byte 100`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := valid()
			c.change(m)
			err := m.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", c.want)
			}
			if got := strings.TrimPrefix(err.Error(), "outbox: invalid message: "); got != c.want {
				t.Fatalf("Validate = %q\nwant                      %q", err, c.want)
			}
			var fe *outbox.FieldError
			if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &fe) {
				t.Fatalf("error %v: want a *FieldError matching ErrInvalidMessage", err)
			}
			if !strings.HasPrefix(c.want, fe.Field+" ") || fe.Problem != strings.TrimPrefix(c.want, fe.Field+" ") {
				t.Fatalf("FieldError{%q, %q} does not split %q", fe.Field, fe.Problem, c.want)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	t.Parallel()
	var m *outbox.Message
	if err := m.Validate(); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("nil.Validate() = %v", err)
	}
}

func TestValidateLimits(t *testing.T) {
	t.Parallel()
	m := valid()
	m.Payload = make([]byte, 2<<20)
	m.Stream = strings.Repeat("s", 300)
	if err := m.Validate(); err == nil {
		t.Fatal("Validate with the defaults accepted a 300-byte stream")
	}
	if err := m.ValidateLimits(outbox.Limits{MaxPayloadBytes: 4 << 20, MaxStreamLen: 300}); err != nil {
		t.Fatalf("ValidateLimits with raised limits = %v", err)
	}
	tight := outbox.Limits{MaxPayloadBytes: 10, MaxHeaders: 1, MaxHeaderBytes: 5, MaxDestinationLen: 3, MaxTypeLen: 3, MaxStreamLen: 1}
	for _, c := range []struct {
		change func(m *outbox.Message)
		want   string
	}{
		{func(m *outbox.Message) { m.Destination = "abcd" }, "destination is 4 bytes, over the limit of 3"},
		{func(m *outbox.Message) { m.Type = "abcd" }, "type is 4 bytes, over the limit of 3"},
		{func(m *outbox.Message) { m.Stream = "ab" }, "stream is 2 bytes, over the limit of 1"},
		{func(m *outbox.Message) { m.Payload = make([]byte, 11) }, "payload is 11 bytes, over the limit of 10"},
		{func(m *outbox.Message) { m.Headers = map[string]string{"A": "1", "B": "2"} }, "headers hold 2 entries, over the limit of 1"},
		{func(m *outbox.Message) { m.Headers = map[string]string{"AB": "1234"} }, "headers hold 6 bytes of names and values, over the limit of 5"},
	} {
		m := &outbox.Message{Destination: "d", Type: "t"}
		c.change(m)
		err := m.ValidateLimits(tight)
		if err == nil || err.Error() != "outbox: invalid message: "+c.want {
			t.Errorf("ValidateLimits = %v, want %q", err, c.want)
		}
	}
	err := valid().ValidateLimits(outbox.Limits{MaxHeaders: -1})
	if !errors.Is(err, outbox.ErrInvalidLimits) || errors.Is(err, outbox.ErrInvalidMessage) || !strings.Contains(err.Error(), "Limits.MaxHeaders") {
		t.Fatalf("negative limit: %v, want ErrInvalidLimits naming Limits.MaxHeaders", err)
	}
}

// Limits over what a store keeps are refused, naming the field; the
// ceiling itself is valid, and a message at it passes.
func TestLimitsCeiling(t *testing.T) {
	if err := outbox.MaxLimits.Validate(); err != nil {
		t.Fatalf("MaxLimits.Validate() = %v", err)
	}
	for _, tc := range []struct {
		l    outbox.Limits
		name string
	}{
		{outbox.Limits{MaxPayloadBytes: outbox.MaxLimits.MaxPayloadBytes + 1}, "Limits.MaxPayloadBytes"},
		{outbox.Limits{MaxHeaders: outbox.MaxLimits.MaxHeaders + 1}, "Limits.MaxHeaders"},
		{outbox.Limits{MaxHeaderBytes: outbox.MaxLimits.MaxHeaderBytes + 1}, "Limits.MaxHeaderBytes"},
		{outbox.Limits{MaxDestinationLen: 5000}, "Limits.MaxDestinationLen"},
		{outbox.Limits{MaxStreamLen: 2000}, "Limits.MaxStreamLen"},
		{outbox.Limits{MaxTypeLen: 1025}, "Limits.MaxTypeLen"},
	} {
		err := tc.l.Validate()
		if !errors.Is(err, outbox.ErrInvalidLimits) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%+v: %v, want ErrInvalidLimits naming %s", tc.l, err, tc.name)
		}
	}
	m := valid()
	m.Stream = strings.Repeat("s", outbox.MaxLimits.MaxStreamLen)
	m.Payload = make([]byte, 2<<20)
	if err := m.ValidateLimits(outbox.MaxLimits); err != nil {
		t.Fatalf("a message at MaxLimits: %v", err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	t.Parallel()
	got := outbox.Limits{MaxStreamLen: 7}.WithDefaults()
	want := outbox.Limits{MaxPayloadBytes: 1 << 20, MaxHeaders: 64, MaxHeaderBytes: 16 << 10,
		MaxDestinationLen: 200, MaxStreamLen: 7, MaxTypeLen: 200}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if err := (outbox.Limits{}).Validate(); err != nil {
		t.Fatalf("zero Limits: %v", err)
	}
}

func TestPrepareValidates(t *testing.T) {
	t.Parallel()
	m := valid()
	m.Stream = "a\x00b"
	if err := m.Prepare(); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("Prepare = %v, want ErrInvalidMessage", err)
	}
	m = valid()
	m.Stream = strings.Repeat("s", 201)
	if err := m.PrepareLimits(outbox.Limits{MaxStreamLen: 300}); err != nil || m.ID.Version() != 7 {
		t.Fatalf("PrepareLimits = %v, ID %s (want a UUIDv7)", err, m.ID)
	}
}
