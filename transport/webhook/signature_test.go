package webhook_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

var (
	key   = []byte("whsec_current")
	ts    = strconv.FormatInt(epoch.Unix(), 10)
	body  = []byte(`{"order":42}`)
	valid = webhook.Sign(key, ts, body)
)

func TestVerify(t *testing.T) {
	for _, c := range []struct {
		name      string
		secret    []byte
		timestamp string
		header    string
		body      []byte
		now       time.Time
		tolerance time.Duration
		want      error // nil: valid
	}{
		{"valid", key, ts, valid, body, epoch, 0, nil},
		{"valid at tolerance", key, ts, valid, body, epoch.Add(5 * time.Minute), 0, nil},
		{"tampered body", key, ts, valid, []byte(`{"order":43}`), epoch, 0, webhook.ErrSignatureMismatch},
		{"wrong key", []byte("other"), ts, valid, body, epoch, 0, webhook.ErrSignatureMismatch},
		{"stale", key, ts, valid, body, epoch.Add(5*time.Minute + time.Second), 0, webhook.ErrStaleTimestamp},
		{"from the future", key, ts, valid, body, epoch.Add(-time.Hour), time.Minute, webhook.ErrStaleTimestamp},
		{"age check off", key, ts, valid, body, epoch.Add(24 * time.Hour), -1, nil},
		{"timestamp changed", key, strconv.FormatInt(epoch.Unix()+1, 10), valid, body, epoch, 0, webhook.ErrSignatureMismatch},
		{"bad timestamp", key, "yesterday", valid, body, epoch, 0, webhook.ErrBadTimestamp},
		{"no timestamp", key, "", valid, body, epoch, 0, webhook.ErrBadTimestamp},
		{"no signature", key, ts, "", body, epoch, 0, webhook.ErrNoSignature},
		{"other scheme only", key, ts, "v0=abcd", body, epoch, 0, webhook.ErrNoSignature},
		{"other scheme first", key, ts, "v0=abcd, " + valid, body, epoch, 0, nil},
		{"bad hex", key, ts, "v1=zz", body, epoch, 0, webhook.ErrSignatureMismatch},
		{"empty secret", nil, ts, valid, body, epoch, 0, webhook.ErrNoSecret},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := webhook.Verify(c.secret, c.timestamp, c.header, c.body, c.now, c.tolerance)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !errors.Is(err, webhook.ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want %v and ErrInvalidSignature", err, c.want)
			}
		})
	}
}

// TestRotatedKeys: while the sender signs with the old and the new key,
// receivers holding either accept, others refuse.
func TestRotatedKeys(t *testing.T) {
	oldKey, newKey := []byte("whsec_old"), []byte("whsec_new")
	h, got := capture()
	tr, fake := serve(t, h, webhook.Config{Secret: newKey, AdditionalSecrets: [][]byte{oldKey}})
	if err := tr.Deliver(context.Background(), message()); err != nil {
		t.Fatal(err)
	}
	c := <-got
	sig, stamp := c.header.Get(webhook.HeaderSignature), c.header.Get(webhook.HeaderTimestamp)
	if n := strings.Count(sig, "v1="); n != 2 {
		t.Fatalf("signature header %q: want 2 signatures", sig)
	}
	for _, k := range [][]byte{oldKey, newKey} {
		if err := webhook.Verify(k, stamp, sig, c.body, fake.Now(), 0); err != nil {
			t.Errorf("Verify with %s = %v", k, err)
		}
	}
	if err := webhook.Verify([]byte("whsec_unrelated"), stamp, sig, c.body, fake.Now(), 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("Verify with another key = %v", err)
	}
}

func TestRequireSignature(t *testing.T) {
	var seen []byte
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	})
	h := webhook.RequireSignature(key, 0, next)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for _, c := range []struct {
		name, timestamp, sig string
		want                 int
	}{
		{"valid", now, webhook.Sign(key, now, body), http.StatusAccepted},
		{"forged", now, webhook.Sign([]byte("guess"), now, body), http.StatusUnauthorized},
		{"stale", ts, webhook.Sign(key, ts, body), http.StatusUnauthorized},
		{"unsigned", now, "", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen = nil
			r := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(string(body)))
			r.Header.Set(webhook.HeaderTimestamp, c.timestamp)
			r.Header.Set(webhook.HeaderSignature, c.sig)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d (%s)", w.Code, c.want, w.Body)
			}
			if (c.want == http.StatusAccepted) != (string(seen) == string(body)) {
				t.Fatalf("next saw %q", seen)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestVerifyRequestBodyTooLarge(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/hooks", io.LimitReader(zeros{}, webhook.MaxVerifyBody+1))
	if _, err := webhook.VerifyRequest(r, key, 0); !errors.Is(err, webhook.ErrBodyTooLarge) {
		t.Fatalf("VerifyRequest = %v, want ErrBodyTooLarge", err)
	}
	w := httptest.NewRecorder()
	r = httptest.NewRequest(http.MethodPost, "/hooks", io.LimitReader(zeros{}, webhook.MaxVerifyBody+1))
	webhook.RequireSignature(key, 0, http.NotFoundHandler()).ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", w.Code)
	}
}
