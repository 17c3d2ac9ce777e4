// Package tlsfault tells a TLS handshake that failed for good from one
// that was cut short. Transports and sources dial brokers over TLS; a
// certificate they cannot verify, a name it was not issued for, a server
// that refuses their own certificate or does not speak TLS at all are
// mistakes of the configuration (or of the server's), which no redial
// cures, so a program starting with one should stop and say so. A
// handshake that timed out or lost its connection is the network's, and
// is tried again.
package tlsfault

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
)

// Refused reports whether err says that a TLS handshake could not
// succeed as configured: the server's certificate did not verify (an
// unknown authority, a name it was not issued for, expired or otherwise
// invalid), the server answered with a TLS alert (such as refusing the
// client's certificate), or the server does not speak TLS on that port.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		op       *net.OpError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) {
		return true
	}
	// The server's alert reaches the client as a net.OpError whose Op is
	// "remote error" (crypto/tls keeps the alert's type unexported).
	return errors.As(err, &op) && op.Op == "remote error"
}
