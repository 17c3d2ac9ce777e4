package wfstore

import (
	"encoding/json"
	"fmt"
)

// EncodeUpstream is how stores keep Run.Upstream: a JSON object of task
// ID to upstream IDs, or nil (SQL NULL) for a nil map.
func EncodeUpstream(up map[string][]string) (*string, error) {
	if up == nil {
		return nil, nil
	}
	b, err := json.Marshal(up)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	s := string(b)
	return &s, nil
}

// DecodeUpstream reads what EncodeUpstream wrote; empty (NULL) is nil.
func DecodeUpstream(s string) (map[string][]string, error) {
	if s == "" {
		return nil, nil
	}
	var up map[string][]string
	if err := json.Unmarshal([]byte(s), &up); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return up, nil
}
