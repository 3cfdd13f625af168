package sim_test

import (
	"fmt"
	"os"

	"github.com/fencelock/fence/internal/sim"
)

// The seed's race with fencing on: the guard rejects the paused worker's write.
func ExampleSimulate() {
	rep, err := sim.Simulate("pause-past-ttl", true, sim.Options{Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := sim.WriteText(os.Stdout, rep); err != nil {
		fmt.Println(err)
	}
	// Output:
	// === pause-past-ttl, fencing on ===
	// A pauses past its TTL; B acquires and writes; A wakes up and writes
	// (ttl 30s, 1 tick = 1s, seed 1)
	//
	//   T0   A  acquire "ledger-lock": granted token 1 (lease A1, ttl 30s)
	//   T10  A  pause (GC) for 22s, until T32
	//   T30  A  lease A1 (token 1) expired at the lock service
	//   T31  B  acquire "ledger-lock": granted token 2 (lease B1, ttl 30s)
	//   T31  B  write "ledger" = "B's data" with token 2: accepted
	//   T32  A  wakes up after 22s (GC), unaware of the pause
	//   T32  A  write "ledger" = "A's data" with token 1: REJECTED: fence: stale token 1 for "ledger", highest seen 2
	//
	// outcome:
	//   "ledger" holds "B's data" (token 2, lease B1)
	//   writes accepted: 1, rejected as stale: 1
	//   invariant holds: accepted writes carry increasing tokens, equal only within one lease
}

// CheckWrites finds the accepted writes that fencing would have refused.
func ExampleCheckWrites() {
	history := []sim.Write{
		{At: sim.T(31), Worker: "B", Resource: "ledger", Token: 2, Lease: "B1"},
		{At: sim.T(32), Worker: "A", Resource: "ledger", Token: 1, Lease: "A1"},
	}
	for _, v := range sim.CheckWrites(history) {
		fmt.Println(v)
	}
	// Output:
	// T32 "ledger": token 1 (lease A1) accepted after token 2 (lease B1, T31)
}
