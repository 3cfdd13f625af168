package main

import (
	"testing"

	"github.com/fencelock/fence/internal/testserv"
)

func TestServe_StoreRedis_TwoServersShareLocksAndData(t *testing.T) {
	testserv.SkipIfShort(t)
	rs := testserv.Redis(t)
	playRaceAcrossServers(t, "redis://"+rs.Addr)
}
