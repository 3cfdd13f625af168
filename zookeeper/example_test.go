package zookeeper_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/zookeeper"
)

// The main flow: take the lock, carry its token to the resource, release. The second
// holder's token is higher, so a guard would reject a late write of the first. (Not
// run by go test, it needs a server on the default port; TestExample_Flow runs the
// same flow on the test server.)
func Example() {
	l, err := zookeeper.Open([]string{"127.0.0.1:2181"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ctx := context.Background()
	name := "example/" + driver.NewLeaseID()[:8]

	first, err := l.Acquire(ctx, name, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = first.Fence() // every write under the lease carries this to a guard
	if err := first.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	second, err := l.Acquire(ctx, name, 10*time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Release(ctx)
	fmt.Println("second token is higher:", second.Token() > first.Token())
}
