package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/termtext"
)

// Client calls the admin API. The zero HTTPClient means
// http.DefaultClient.
type Client struct {
	// BaseURL is the server, such as http://127.0.0.1:8080.
	BaseURL string
	// Token is the bearer token.
	Token string
	// HTTPClient sends the requests; nil means http.DefaultClient. The
	// client follows no redirect whatever its CheckRedirect: the admin API
	// answers none, so a redirect is an error (see Do).
	HTTPClient *http.Client
	// Timeout bounds how long a request waits for the server to say
	// something: to connect and start its answer, then between reads of
	// the answer. The API reports progress on long requests (a bulk action
	// or a purge, see ProgressHeader) and each report starts the wait
	// again, so such a request goes on for as long as the server works on
	// it. A request the server leaves unanswered that long fails with a
	// *NoAnswerError. Zero means no limit.
	Timeout time.Duration
}

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (when not nil). A problem answer is returned as a *Problem. A
// redirect is not followed but returned as an error naming its Location:
// Go's client turned a POST redirected with 301, 302 or 303 into a GET
// without its body, and sent a 307 or 308 on to wherever it pointed, so a
// bulk replay behind an http-to-https proxy was reported done, having
// done nothing. It returns the status.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	if strings.ContainsAny(c.BaseURL, "?#") {
		// Joined to the path, a query took the path into itself (the
		// request went to the dashboard), and a connection error printed
		// whatever secret the query held.
		return 0, errors.New("admin: the base URL (--server) holds a query or a fragment; give the server's address alone, such as http://127.0.0.1:8080")
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := http.Client{}
	if c.HTTPClient != nil {
		hc = *c.HTTPClient
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, wd := c.watch(req)
	defer wd.stop()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, wd.err(req, path, err)
	}
	defer resp.Body.Close()
	resp.Body = wd.body(resp.Body)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return resp.StatusCode, fmt.Errorf("admin: %s %s answered %s, a redirect to %q: the admin API answers none; is the base URL (--server) the API's own address?",
			method, path, termtext.Escape(resp.Status), termtext.Escape(resp.Header.Get("Location")))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return resp.StatusCode, wd.err(req, path, err)
	}
	if len(data) > maxAnswer && resp.StatusCode < 400 {
		return resp.StatusCode, fmt.Errorf("admin: %s %s answered %d with more than the %d MiB this client reads (a page of items with large payloads?): ask for fewer items (a smaller limit)",
			method, path, resp.StatusCode, maxAnswer>>20)
	}
	if resp.StatusCode >= 400 {
		p := &Problem{Status: resp.StatusCode}
		if json.Unmarshal(data, p) != nil || p.Title == "" {
			p = &Problem{Status: resp.StatusCode, Title: fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))}
			if len(bytes.TrimSpace(data)) > 0 {
				p.Detail = notJSON(resp, data)
			}
		}
		return resp.StatusCode, p
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("admin: %s %s answered %d, %s: %w", method, path, resp.StatusCode, notJSON(resp, data), err)
		}
	}
	return resp.StatusCode, nil
}

// maxAnswer is the most of an answer the client reads. A list's page of
// 1,000 items whose payloads are each up to a megabyte can be larger: such
// an answer is reported as too large, not as JSON that ends too soon.
const maxAnswer = 64 << 20

// notJSONQuote is how much of an answer that is not the API's JSON an
// error quotes.
const notJSONQuote = 200

// notJSON describes an answer that is not the API's JSON (a proxy's error
// page, a login page, an empty body): its type and size, and its start made
// printable. Quoting it whole put megabytes of HTML, terminal escapes
// included, on the operator's terminal.
func notJSON(resp *http.Response, data []byte) string {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "no Content-Type"
	}
	start := strings.TrimSpace(string(data))
	if r := []rune(start); len(r) > notJSONQuote {
		start = string(r[:notJSONQuote]) + "…"
	}
	return fmt.Sprintf("not JSON (%s, %d bytes): %s", termtext.Escape(ct), len(data), termtext.Escape(start))
}

// Enqueue posts a message.
func (c *Client) Enqueue(ctx context.Context, req EnqueueRequest) (EnqueueResponse, error) {
	var out EnqueueResponse
	if f := req.invalidText(); f != "" {
		// encoding/json would send it with U+FFFD in place of each bad
		// byte: two keys or streams that differ only there would be one.
		return out, fmt.Errorf("admin: enqueue: %s is not valid UTF-8 text", f)
	}
	_, err := c.Do(ctx, http.MethodPost, "/v1/messages", nil, req, &out)
	return out, err
}

// Messages lists messages.
func (c *Client) Messages(ctx context.Context, q url.Values) (List[Message], error) {
	var out List[Message]
	_, err := c.Do(ctx, http.MethodGet, "/v1/messages", q, nil, &out)
	return out, err
}

// Message shows a message.
func (c *Client) Message(ctx context.Context, id string) (Message, error) {
	var out Message
	_, err := c.Do(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// MessageAction runs retry-now, reset, cancel or dead-letter on a message.
func (c *Client) MessageAction(ctx context.Context, id, action string, req ActionRequest) (ActionResult, error) {
	var out ActionResult
	if id == "" {
		return out, errEmptyID("message")
	}
	_, err := c.Do(ctx, http.MethodPost, "/v1/messages/"+url.PathEscape(id)+"/"+action, nil, req, &out)
	return out, err
}

func streamPath(destination, stream string) string {
	return "/v1/streams/" + segment(destination) + "/" + segment(stream)
}

// segment escapes s as one path segment. url.PathEscape leaves "." and
// ".." as they are, and a path holding such a segment is cleaned away by
// the server's router (a redirect to another path); %2E is not, and the
// router unescapes it into the name.
func segment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// Stream shows a stream.
func (c *Client) Stream(ctx context.Context, destination, stream string) (Stream, error) {
	var out Stream
	_, err := c.Do(ctx, http.MethodGet, streamPath(destination, stream), nil, nil, &out)
	return out, err
}

// StreamWithoutPayload shows a stream as Stream does, its head without
// its payload (PayloadOmitted).
func (c *Client) StreamWithoutPayload(ctx context.Context, destination, stream string) (Stream, error) {
	var out Stream
	_, err := c.Do(ctx, http.MethodGet, streamPath(destination, stream), url.Values{"payload": {"false"}}, nil, &out)
	return out, err
}

// ReleaseStream releases a stream.
func (c *Client) ReleaseStream(ctx context.Context, destination, stream, notes string) (ActionResult, error) {
	var out ActionResult
	_, err := c.Do(ctx, http.MethodPost, streamPath(destination, stream)+"/release", nil, ActionRequest{Notes: notes}, &out)
	return out, err
}

// DeadLetters lists dead letters.
func (c *Client) DeadLetters(ctx context.Context, q url.Values) (List[Entry], error) {
	var out List[Entry]
	_, err := c.Do(ctx, http.MethodGet, "/v1/dlq", q, nil, &out)
	return out, err
}

// DeadLetter shows a dead letter with its history.
func (c *Client) DeadLetter(ctx context.Context, id string) (Entry, error) {
	var out Entry
	_, err := c.Do(ctx, http.MethodGet, "/v1/dlq/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// EntryAction replays, resolves or deletes one dead letter.
func (c *Client) EntryAction(ctx context.Context, id, action, notes string) (ActionResult, error) {
	var out ActionResult
	if id == "" {
		return out, errEmptyID("dead-letter entry")
	}
	method, path := http.MethodPost, "/v1/dlq/"+url.PathEscape(id)+"/"+action
	if action == "delete" {
		method, path = http.MethodDelete, "/v1/dlq/"+url.PathEscape(id)
	}
	_, err := c.Do(ctx, method, path, nil, ActionRequest{Notes: notes}, &out)
	return out, err
}

// Bulk replays, resolves or deletes the dead letters matching a filter.
func (c *Client) Bulk(ctx context.Context, action string, req BulkRequest) (BulkResult, error) {
	var out BulkResult
	_, err := c.Do(ctx, http.MethodPost, "/v1/dlq/"+action, nil, req, &out)
	return out, err
}

// Recover replays what was dead-lettered for a destination since a time.
func (c *Client) Recover(ctx context.Context, req RecoverRequest) (BulkResult, error) {
	var out BulkResult
	_, err := c.Do(ctx, http.MethodPost, "/v1/dlq/recover", nil, req, &out)
	return out, err
}

// Purge removes dead letters older than a duration.
func (c *Client) Purge(ctx context.Context, req PurgeRequest) (BulkResult, error) {
	var out BulkResult
	_, err := c.Do(ctx, http.MethodPost, "/v1/dlq/purge", nil, req, &out)
	return out, err
}

// Stats returns the monitoring summary.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	_, err := c.Do(ctx, http.MethodGet, "/v1/stats", nil, nil, &out)
	return out, err
}

// Breakers returns the breakers.
func (c *Client) Breakers(ctx context.Context) (List[Breaker], error) {
	var out List[Breaker]
	_, err := c.Do(ctx, http.MethodGet, "/v1/breakers", nil, nil, &out)
	return out, err
}

// Audit lists the audit log.
func (c *Client) Audit(ctx context.Context, q url.Values) (List[AuditRecord], error) {
	var out List[AuditRecord]
	_, err := c.Do(ctx, http.MethodGet, "/v1/audit", q, nil, &out)
	return out, err
}

// HandlerTransport is an http.RoundTripper that serves requests with a
// handler in this process: the CLI's --db mode runs the API on a store
// without a server.
type HandlerTransport struct{ Handler http.Handler }

// RoundTrip serves req with the handler.
func (t HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &responseRecorder{header: http.Header{}, status: http.StatusOK, ctx: req.Context()}
	t.Handler.ServeHTTP(rec, req)
	return &http.Response{StatusCode: rec.status, Header: rec.header, Body: io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

type responseRecorder struct {
	ctx    context.Context
	header http.Header
	body   bytes.Buffer
	status int
	wrote  bool
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) WriteHeader(s int) {
	if s >= 100 && s < 200 && s != http.StatusSwitchingProtocols {
		// informational: a progress report, not the answer
		if tr := httptrace.ContextClientTrace(r.ctx); tr != nil && tr.Got1xxResponse != nil && !r.wrote {
			_ = tr.Got1xxResponse(s, textproto.MIMEHeader(r.header.Clone()))
		}
		return
	}
	if !r.wrote {
		r.status, r.wrote = s, true
	}
}
func (r *responseRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// errEmptyID refuses an action on one item whose ID is empty (an unset
// variable): the path it makes would name a route of its own.
func errEmptyID(what string) error {
	return fmt.Errorf("admin: the %s ID is empty; nothing was done", what)
}

// invalidText names the first text field of r that is not UTF-8 ("" when
// none is).
func (r *EnqueueRequest) invalidText() string {
	for _, f := range []struct{ name, v string }{
		{"destination", r.Destination}, {"topic", r.Topic}, {"type", r.Type}, {"stream", r.Stream},
		{"ordering", r.Ordering}, {"idempotency_key", r.IdempotencyKey}, {"payload_base64", r.PayloadBase64},
	} {
		if !utf8.ValidString(f.v) {
			return f.name
		}
	}
	for k, v := range r.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return "headers"
		}
	}
	return ""
}
