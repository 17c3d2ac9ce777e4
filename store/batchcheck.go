package store

import (
	"errors"
	"fmt"

	"github.com/backstophq/backstop/outbox"
)

// ErrInvalidBatch is matched (errors.Is) by every error Batch.Validate
// returns.
var ErrInvalidBatch = errors.New("store: invalid batch")

// Validate reports the first malformed field of b. Stores call it before
// touching the database.
func (b *Batch) Validate() error {
	switch {
	case b == nil:
		return fmt.Errorf("%w: nil batch", ErrInvalidBatch)
	case b.Instance.ID == "":
		return fmt.Errorf("%w: Instance.ID is required", ErrInvalidBatch)
	case outbox.CleanText(b.Instance.ID, 200) != b.Instance.ID:
		return fmt.Errorf("%w: Instance.ID %q must be valid UTF-8 without NUL, at most 200 characters", ErrInvalidBatch,
			outbox.CleanText(b.Instance.ID, 50))
	case b.Claim.Limit < 0:
		return fmt.Errorf("%w: Claim.Limit must not be negative, got %d", ErrInvalidBatch, b.Claim.Limit)
	case b.Claim.MaxBytes < 0:
		return fmt.Errorf("%w: Claim.MaxBytes must not be negative, got %d", ErrInvalidBatch, b.Claim.MaxBytes)
	case b.Claim.Lease < 0:
		return fmt.Errorf("%w: Claim.Lease must not be negative, got %s", ErrInvalidBatch, b.Claim.Lease)
	}
	for i, c := range b.Completions {
		if c.Status < 0 || c.Status > MaxStatus {
			return fmt.Errorf("%w: Completions[%d].Status %d is outside 0-%d", ErrInvalidBatch, i, c.Status, MaxStatus)
		}
	}
	for i, f := range b.Failures {
		if f.CompletedStatus < 0 || f.CompletedStatus > MaxStatus {
			return fmt.Errorf("%w: Failures[%d].CompletedStatus %d is outside 0-%d", ErrInvalidBatch, i, f.CompletedStatus, MaxStatus)
		}
		if f.RetryAfter < 0 {
			return fmt.Errorf("%w: Failures[%d].RetryAfter must not be negative, got %s", ErrInvalidBatch, i, f.RetryAfter)
		}
	}
	for i, r := range b.Releases {
		if r.CompletedStatus < 0 || r.CompletedStatus > MaxStatus {
			return fmt.Errorf("%w: Releases[%d].CompletedStatus %d is outside 0-%d", ErrInvalidBatch, i, r.CompletedStatus, MaxStatus)
		}
		if r.After < 0 {
			return fmt.Errorf("%w: Releases[%d].After must not be negative, got %s", ErrInvalidBatch, i, r.After)
		}
	}
	return nil
}
