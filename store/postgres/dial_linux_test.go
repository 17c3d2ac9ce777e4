package postgres

import (
	"context"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/backstophq/backstop/store"
)

// TestOpenedConnectionsFindADeadPeer: the connections Open makes probe a
// silent database and give up on one that stops acknowledging, so that a
// call on a connection a partition killed fails in seconds rather than at
// its caller's limit (the relay's 30 s), however long a live statement
// runs.
func TestOpenedConnectionsFindADeadPeer(t *testing.T) {
	admin(t)
	s, err := Open(context.Background(), testURL(), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	sc, ok := c.Conn().PgConn().Conn().(syscall.Conn)
	if !ok {
		t.Skipf("the connection is a %T (TLS?), whose socket this test cannot read", c.Conn().PgConn().Conn())
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	want := map[string]int{
		"SO_KEEPALIVE":     1,
		"TCP_KEEPIDLE":     int(keepAliveIdle.Seconds()),
		"TCP_KEEPINTVL":    int(keepAliveInterval.Seconds()),
		"TCP_KEEPCNT":      keepAliveCount,
		"TCP_USER_TIMEOUT": int(userTimeout.Milliseconds()),
	}
	if err := raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				t.Errorf("getsockopt %s: %v", name, err)
			}
			got[name] = v
		}
	}); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %d, want %d", name, got[name], w)
		}
	}
	if p := s.Pool().Config().PingTimeout; p != pingTimeout {
		t.Errorf("pool PingTimeout = %v, want %v", p, pingTimeout)
	}
}
