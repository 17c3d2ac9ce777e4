package errorhandling_test

import (
	"errors"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
)

// BenchmarkClassify is the cost of classifying a transient HTTP error, the
// relay's most common failure.
func BenchmarkClassify(b *testing.B) {
	c := eh.NewErrorClassifier()
	err := eh.WithHTTPStatus(errors.New("bench"), 503)
	b.ReportAllocs()
	for b.Loop() {
		if !c.Classify(err).Retryable {
			b.Fatal("503 not retryable")
		}
	}
}

// BenchmarkFingerprint is the cost of fingerprinting a network error.
func BenchmarkFingerprint(b *testing.B) {
	err := errors.New("dial tcp 10.0.0.7:5432: connect: connection refused (attempt 3, id 0192f3c4-8f2a-7b1e-9c3d-5a6b7c8d9e0f)")
	b.ReportAllocs()
	for b.Loop() {
		_ = eh.Fingerprint(err)
	}
}
