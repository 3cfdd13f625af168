package redis

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

// TestLocker_Conformance runs the shared Locker suite against the package's
// redis-server. Subtests use unique names, so one server serves them all.
func TestLocker_Conformance(t *testing.T) {
	server(t)
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
		l, _ := newLocker(t, nil)
		return l
	})
}
