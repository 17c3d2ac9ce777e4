// Package liveness keeps whether a receiver is taking messages from its
// source now, and when it is not, why: what its readiness check reports.
package liveness

import "sync"

// State is a receiver's liveness. The zero value is not live, with no
// cause yet. It is safe for concurrent use.
type State struct {
	mu   sync.Mutex
	live bool
	why  error
}

// Set records that the receiver is live, or not and why.
func (s *State) Set(live bool, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live, s.why = live, why
}

// Get reports whether the receiver is live and, when it is not, why:
// the cause last Set, or notStarted when none was.
func (s *State) Get(notStarted error) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live {
		return true, nil
	}
	if s.why == nil {
		return false, notStarted
	}
	return false, s.why
}
