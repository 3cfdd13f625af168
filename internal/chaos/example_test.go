package chaos_test

import (
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/chaos"
)

// Check judges a history: here the pause-past-TTL timeline without fencing. Worker 0
// reads under token 1 and stalls; its lease expires, worker 1 (token 2) increments;
// worker 0 wakes and its write, based on the old read, is accepted.
func ExampleCheck() {
	op := func(w int, kind chaos.Kind, token uint64, lease, value string, call, ret int64) chaos.Op {
		return chaos.Op{Worker: w, Kind: kind, Key: "counter", Lock: "jobs", Token: fenceToken(token),
			Lease: lease, Value: value, Result: chaos.ResultOK, Call: call, Return: ret}
	}
	history := []chaos.Op{
		op(0, chaos.KindAcquire, 1, "a", "", 0, 1),
		op(0, chaos.KindRead, 1, "a", "", 2, 3),
		op(1, chaos.KindAcquire, 2, "b", "", 10, 11),
		op(1, chaos.KindRead, 2, "b", "", 12, 13),
		op(1, chaos.KindWrite, 2, "b", "1:w1:1", 14, 15),
		op(0, chaos.KindWrite, 1, "a", "1:w0:1", 20, 21),
		{Worker: -1, Kind: chaos.KindRead, Key: "counter", Lock: "jobs", Value: "1:w0:1", Result: chaos.ResultOK, Call: 30, Return: 31},
	}
	r, err := chaos.Check(history, chaos.CheckOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("linearizable:", r.Linearizable)
	fmt.Println("stale writes accepted:", r.StaleAccepted)
	fmt.Println("acknowledged writes lost:", r.Lost)
	fmt.Println("lock overlaps:", r.Overlaps)
	// Output:
	// linearizable: Illegal
	// stale writes accepted: 1
	// acknowledged writes lost: 1
	// lock overlaps: 1
}

func fenceToken(n uint64) fence.Token { return fence.Token(n) }
