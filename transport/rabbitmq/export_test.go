package rabbitmq

import "github.com/backstophq/backstop/outbox"

// DropConnection closes t's connection under it, as a broker restart
// would.
func DropConnection(t *Transport) {
	t.mu.Lock()
	conn := t.conn
	t.mu.Unlock()
	_ = conn.Close()
}

// HeaderFrameSize is the size of the content header frame of m.
func HeaderFrameSize(t *Transport, m *outbox.Message) int {
	pub, err := t.publishing(m, t.routingKey(m))
	if err != nil {
		panic(err)
	}
	return headerFrameSize(pub)
}
