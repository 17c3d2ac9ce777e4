// Package amqplogin dials an AMQP broker so that a login cut short is not
// taken for a login refused.
//
// RabbitMQ answers a refused login by closing the socket, unless the
// client advertises the authentication_failure_close capability, which
// amqp091-go does not let a caller add. The client then reports
// amqp.ErrCredentials (or amqp.ErrVhost, one step later) for any socket
// closed during the login: refused credentials, and equally a broker
// restarting or a proxy hanging up at that moment. Callers stop a program
// at start on refused credentials, so one such report is confirmed by a
// second login: a broker that refuses refuses again, one that was cut
// short answers or cannot be reached.
package amqplogin

import (
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial calls dial, and once more at once if the first login ended as
// amqp.ErrCredentials or amqp.ErrVhost report. It returns the last call's
// result.
func Dial(dial func() (*amqp.Connection, error)) (*amqp.Connection, error) {
	conn, err := dial()
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) {
		conn, err = dial()
	}
	return conn, err
}
