package postgres

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The connections Open makes find out that the database has gone away
// (a partition, a host that vanished, a NAT or firewall that forgot them)
// from the network itself, in seconds, without a limit on how long a
// statement may run: the database's kernel answers keep-alive probes and
// acknowledges what was sent while the statement runs, however slowly.
// By default they learnt it only when the caller's context ran out (the
// relay's 30 s store call limit), once for each pooled connection the
// partition left dead, and a listening connection never did.
const (
	// keepAliveIdle is how long a connection stays silent before the first
	// keep-alive probe; keepAliveInterval and keepAliveCount, how often
	// probes follow and how many go unanswered before the connection is
	// given up.
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = 2 * time.Second
	keepAliveCount    = 3
	// userTimeout is how long data sent may go unacknowledged before the
	// connection is given up (TCP_USER_TIMEOUT, on Linux): a statement
	// sent into a partition is not retransmitted for a quarter of an hour.
	userTimeout = keepAliveIdle + keepAliveCount*keepAliveInterval
	// pingTimeout bounds the ping pgxpool makes on a connection that has
	// been idle for a second before handing it out; a connection that
	// misses it is replaced. It had no bound but the caller's context.
	pingTimeout = 2 * time.Second
)

// detectDeadConnections sets cfg's dialer and pool ping as above, leaving
// a pool_ping_timeout the connection string gives.
func detectDeadConnections(cfg *pgxpool.Config) {
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
		},
		Control: setUserTimeout,
	}
	cfg.ConnConfig.DialFunc = d.DialContext
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = pingTimeout
	}
}
