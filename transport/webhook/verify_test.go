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
	// key is a Standard Webhooks secret; keyBytes what it stands for.
	key      = []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	id       = "01963f6e-8a4b-7c3d-9e2f-0123456789ab"
	ts       = strconv.FormatInt(epoch.Unix(), 10)
	body     = []byte(`{"order":42}`)
	validSig = mustSign(key, id, ts, body)
)

func mustSign(secret []byte, id, ts string, body []byte) string {
	sig, err := webhook.Sign(secret, id, ts, body)
	if err != nil {
		panic(err)
	}
	return sig
}

// headers returns the three Standard Webhooks headers.
func headers(id, ts, sig string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
		if v != "" {
			h.Set(k, v)
		}
	}
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		secret    []byte
		h         http.Header
		body      []byte
		now       time.Time
		tolerance time.Duration
		want      error // nil: valid
	}{
		{"valid", key, headers(id, ts, validSig), body, epoch, 0, nil},
		{"valid at tolerance", key, headers(id, ts, validSig), body, epoch.Add(5 * time.Minute), 0, nil},
		{"valid ahead at tolerance", key, headers(id, ts, validSig), body, epoch.Add(-5 * time.Minute), 0, nil},
		{"tampered body", key, headers(id, ts, validSig), []byte(`{"order":43}`), epoch, 0, webhook.ErrSignatureMismatch},
		{"other id", key, headers("01963f6e-0000-7c3d-9e2f-0123456789ab", ts, validSig), body, epoch, 0, webhook.ErrSignatureMismatch},
		{"timestamp changed", key, headers(id, strconv.FormatInt(epoch.Unix()+1, 10), validSig), body, epoch, 0, webhook.ErrSignatureMismatch},
		{"wrong key", []byte("whsec_b3RoZXIta2V5LW90aGVyLWtleS1vdGhlcg=="), headers(id, ts, validSig), body, epoch, 0, webhook.ErrSignatureMismatch},
		{"prefix used as raw key", []byte("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), headers(id, ts, validSig), body, epoch, 0, webhook.ErrSignatureMismatch},
		{"stale", key, headers(id, ts, validSig), body, epoch.Add(5*time.Minute + time.Second), 0, webhook.ErrStaleTimestamp},
		{"from the future", key, headers(id, ts, validSig), body, epoch.Add(-time.Hour), time.Minute, webhook.ErrStaleTimestamp},
		{"age check off", key, headers(id, ts, validSig), body, epoch.Add(24 * time.Hour), -1, nil},
		{"bad timestamp", key, headers(id, "yesterday", validSig), body, epoch, 0, webhook.ErrBadTimestamp},
		{"fractional timestamp", key, headers(id, ts+".5", validSig), body, epoch, 0, webhook.ErrBadTimestamp},
		{"no timestamp", key, headers(id, "", validSig), body, epoch, 0, webhook.ErrMissingHeaders},
		{"no id", key, headers("", ts, validSig), body, epoch, 0, webhook.ErrMissingHeaders},
		{"no signature", key, headers(id, ts, ""), body, epoch, 0, webhook.ErrMissingHeaders},
		{"other scheme only", key, headers(id, ts, "v1a,abcd"), body, epoch, 0, webhook.ErrNoSignature},
		{"old Backstop scheme", key, headers(id, ts, "v1=abcd"), body, epoch, 0, webhook.ErrNoSignature},
		{"other scheme first", key, headers(id, ts, "v1a,abcd "+validSig), body, epoch, 0, nil},
		{"several, last valid", key, headers(id, ts, "v1,AAAA v1,bm9wZQ== "+validSig), body, epoch, 0, nil},
		{"bad base64", key, headers(id, ts, "v1,!!!"), body, epoch, 0, webhook.ErrSignatureMismatch},
		{"truncated signature", key, headers(id, ts, validSig[:20]), body, epoch, 0, webhook.ErrSignatureMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := webhook.Verify(c.secret, c.h, c.body, c.now, c.tolerance)
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
	for _, secret := range [][]byte{nil, []byte("whsec_"), []byte("whsec_***")} {
		err := webhook.Verify(secret, headers(id, ts, validSig), body, epoch, 0)
		if !errors.Is(err, webhook.ErrBadSecret) || errors.Is(err, webhook.ErrInvalidSignature) {
			t.Errorf("Verify with secret %q = %v, want ErrBadSecret only", secret, err)
		}
	}
}

func TestDecodeSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ secret, key string }{
		{"whsec_a2V5", "key"},
		{"whsec_a2V5MQ==", "key1"},
		{"whsec_a2V5MQ", "key1"}, // unpadded
		{"raw key bytes", "raw key bytes"},
		{"WHSEC_a2V5", "WHSEC_a2V5"}, // the prefix is case-sensitive
	} {
		got, err := webhook.DecodeSecret([]byte(c.secret))
		if err != nil || string(got) != c.key {
			t.Errorf("DecodeSecret(%q) = %q, %v; want %q", c.secret, got, err, c.key)
		}
	}
	for _, bad := range []string{"", "whsec_", "whsec_a2V5!", "whsec_a=2V5"} {
		if _, err := webhook.DecodeSecret([]byte(bad)); !errors.Is(err, webhook.ErrBadSecret) {
			t.Errorf("DecodeSecret(%q) = %v, want ErrBadSecret", bad, err)
		}
	}
}

// TestRotatedKeys: while the sender signs with the old and the new key,
// receivers holding either accept, others refuse.
func TestRotatedKeys(t *testing.T) {
	t.Parallel()
	oldKey, newKey := []byte("whsec_b2xkLWtleS1vbGQta2V5LW9sZC1rZXk="), []byte("raw-new-key-raw-new-key!")
	h, got := capture()
	tr, fake := serve(t, h, webhook.Config{Secret: newKey, AdditionalSecrets: [][]byte{oldKey}})
	if err := tr.Deliver(context.Background(), message()); err != nil {
		t.Fatal(err)
	}
	c := <-got
	sig := c.header.Get(webhook.HeaderSignature)
	if parts := strings.Split(sig, " "); len(parts) != 2 || !strings.HasPrefix(parts[0], "v1,") || !strings.HasPrefix(parts[1], "v1,") {
		t.Fatalf("signature header %q: want 2 space-separated signatures", sig)
	}
	for _, k := range [][]byte{oldKey, newKey} {
		if err := webhook.Verify(k, c.header, c.body, fake.Now(), 0); err != nil {
			t.Errorf("Verify with %s = %v", k, err)
		}
	}
	if err := webhook.Verify([]byte("unrelated"), c.header, c.body, fake.Now(), 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("Verify with another key = %v", err)
	}
}

func TestRequireSignature(t *testing.T) {
	t.Parallel()
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for _, c := range []struct {
		name   string
		secret []byte
		h      http.Header
		want   int
	}{
		{"valid", key, headers(id, now, mustSign(key, id, now, body)), http.StatusAccepted},
		{"forged", key, headers(id, now, mustSign([]byte("guess"), id, now, body)), http.StatusUnauthorized},
		{"stale", key, headers(id, ts, mustSign(key, id, ts, body)), http.StatusUnauthorized},
		{"unsigned", key, headers(id, now, ""), http.StatusUnauthorized},
		{"receiver's secret unusable", []byte("whsec_%%%"), headers(id, now, mustSign(key, id, now, body)), http.StatusInternalServerError},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var seen []byte
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = io.ReadAll(r.Body)
				w.WriteHeader(http.StatusAccepted)
			})
			r := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(string(body)))
			r.Header = c.h
			w := httptest.NewRecorder()
			webhook.RequireSignature(c.secret, 0, next).ServeHTTP(w, r)
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

func TestVerifyRequestBodyLimit(t *testing.T) {
	t.Parallel()
	if webhook.MaxVerifyBody != 1<<20 {
		t.Fatalf("MaxVerifyBody = %d, want the sender's default payload limit, 1 MiB", webhook.MaxVerifyBody)
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	atLimit := make([]byte, webhook.MaxVerifyBody)
	r := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(string(atLimit)))
	r.Header = headers(id, now, mustSign(key, id, now, atLimit))
	if got, err := webhook.VerifyRequest(r, key, 0); err != nil || len(got) != len(atLimit) {
		t.Fatalf("VerifyRequest at the limit = %d bytes, %v", len(got), err)
	}
	r = httptest.NewRequest(http.MethodPost, "/hooks", io.LimitReader(zeros{}, webhook.MaxVerifyBody+1))
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
