package zookeeper_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return open(t, nil) })
}
