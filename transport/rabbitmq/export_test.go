package rabbitmq

// DropConnection closes t's connection under it, as a broker restart
// would.
func DropConnection(t *Transport) {
	t.mu.Lock()
	conn := t.conn
	t.mu.Unlock()
	_ = conn.Close()
}
