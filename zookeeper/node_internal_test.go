package zookeeper

import (
	"testing"
	"time"
)

func TestNodeData_RoundTripsOwner(t *testing.T) {
	for _, owner := range []string{"", "w", "h 5", " lead and trail ", "worker-7:4242 ünïcødé job --flag"} {
		if got := parseData(holdData(1500*time.Millisecond, owner)); got != (nodeData{held: true, ttl: 1500 * time.Millisecond, owner: owner}) {
			t.Errorf("parseData(holdData(1.5s, %q)) = %+v; want held, 1.5s, that owner", owner, got)
		}
		if got := parseData(waitData(owner)); got != (nodeData{owner: owner}) {
			t.Errorf("parseData(waitData(%q)) = %+v; want a waiter with that owner", owner, got)
		}
	}
}

// Without an owner the data is what versions before owners wrote and read ("h <ms>",
// "w"), and their data decodes as owner "".
func TestNodeData_WithoutOwner_AsBeforeOwners(t *testing.T) {
	if got := string(holdData(time.Minute, "")); got != "h 60000" {
		t.Errorf("holdData(1m, \"\") = %q; want \"h 60000\"", got)
	}
	if got := string(waitData("")); got != "w" {
		t.Errorf("waitData(\"\") = %q; want \"w\"", got)
	}
	if got := parseData([]byte("h 60000")); got != (nodeData{held: true, ttl: time.Minute}) {
		t.Errorf("parseData(\"h 60000\") = %+v; want held, 1m, owner \"\"", got)
	}
	for _, other := range []string{"w", "", "h", "h ", "h x", "h 0", "h -5", "h 5x y", "x 5", "wait"} {
		if got := parseData([]byte(other)); got != (nodeData{}) {
			t.Errorf("parseData(%q) = %+v; want a waiter without owner", other, got)
		}
	}
}
