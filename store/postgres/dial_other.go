//go:build !linux

package postgres

import "syscall"

// setUserTimeout does nothing: TCP_USER_TIMEOUT is Linux's. The
// keep-alive probes still find a dead connection that waits for an
// answer.
func setUserTimeout(_, _ string, _ syscall.RawConn) error { return nil }
