package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts a secret given in the Standard Webhooks form:
// "whsec_" followed by the key in base64.
const SecretPrefix = "whsec_"

// ErrBadSecret is matched by the error for a secret that is empty or
// starts with SecretPrefix but is not valid base64 after it.
var ErrBadSecret = errors.New("webhook: unusable secret")

// ErrNoSecret is matched by the error for an empty secret, which signs
// and verifies nothing. It also matches ErrBadSecret.
var ErrNoSecret = fmt.Errorf("%w: empty secret", ErrBadSecret)

// DecodeSecret returns the HMAC key that secret stands for. A secret of
// the Standard Webhooks form, "whsec_" followed by base64 (padded or not),
// stands for the decoded bytes: this is what every Standard Webhooks
// library expects. Any other secret is the key itself, byte for byte, as
// the libraries' raw-key constructors take it (Go's NewWebhookRaw, Node's
// `new Webhook(key, {format: "raw"})`, Python's Webhook(bytes)).
// The specification recommends keys of 24 to 64 random bytes.
func DecodeSecret(secret []byte) ([]byte, error) {
	b64, ok := bytes.CutPrefix(secret, []byte(SecretPrefix))
	if !ok {
		if len(secret) == 0 {
			return nil, ErrNoSecret
		}
		return bytes.Clone(secret), nil
	}
	s := strings.TrimRight(string(b64), "=")
	key, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		// The secret is not echoed.
		return nil, fmt.Errorf("%w: not base64 after %q", ErrBadSecret, SecretPrefix)
	}
	if len(key) == 0 {
		return nil, ErrNoSecret
	}
	return key, nil
}

// Sign returns the webhook-signature entry for a message sent with id (the
// webhook-id header) at timestamp (the webhook-timestamp header, Unix
// seconds) with body, under secret (see DecodeSecret):
//
//	"v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))
//
// as the Standard Webhooks specification defines it. A request signed
// with several secrets carries their entries separated by spaces.
func Sign(secret []byte, id, timestamp string, body []byte) (string, error) {
	key, err := DecodeSecret(secret)
	if err != nil {
		return "", err
	}
	return signature(key, id, timestamp, body), nil
}

// signature is Sign with a decoded key.
func signature(key []byte, id, timestamp string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
}

// signAll returns the webhook-signature header for keys.
func signAll(keys [][]byte, id, timestamp string, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = signature(k, id, timestamp, body)
	}
	return strings.Join(sigs, " ")
}

// mac is HMAC-SHA256(key, id.timestamp.body).
func mac(key []byte, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}
