package testserv_test

import "testing"

// closeTwiceThenRestartFails closes srv twice, then checks that Restart fails and
// that reach (a new connection to the server) fails too. It is the last subtest of
// a server's lifecycle tests: it closes the shared server.
func closeTwiceThenRestartFails(t *testing.T, srv interface {
	Close()
	Restart() error
}, reach func() error) {
	t.Helper()
	srv.Close()
	srv.Close()
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded, want an error")
	}
	if err := reach(); err == nil {
		t.Fatal("connecting after Close succeeded, want an error")
	}
}
