package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// envSlot is set by `fence lock -n N` for its child: the permit's slot, in [0, N).
const envSlot = "FENCE_SLOT"

// kindFlags are -n N and --shared of `fence lock` and `fence acquire`: a permit of
// a semaphore, or a shared lease, instead of the lock.
type kindFlags struct {
	cmd    *cobra.Command
	limit  int
	shared bool
}

func addKindFlags(cmd *cobra.Command) *kindFlags {
	k := &kindFlags{cmd: cmd}
	cmd.Flags().IntVarP(&k.limit, "limit", "n", 0, fmt.Sprintf("take one of N permits of a semaphore (1 to %d; every holder of NAME must use the same N)", fence.MaxLimit))
	cmd.Flags().BoolVar(&k.shared, "shared", false, "take a shared lease: any number of shared holders, or one without --shared")
	return k
}

// permit reports whether -n was given: the lease is a semaphore's permit, with a
// slot.
func (k *kindFlags) permit() bool { return k.cmd.Flags().Changed("limit") }

// options returns the acquire options of the flags, or a usage error: -n out of
// range, or -n with --shared.
func (k *kindFlags) options() ([]fence.AcquireOption, error) {
	switch {
	case !k.permit() && !k.shared:
		return nil, nil
	case k.permit() && k.shared:
		return nil, usagef("-n and --shared cannot be combined: a semaphore's permits are not shared")
	case k.shared:
		return []fence.AcquireOption{fence.WithShared()}, nil
	case k.limit < 1 || k.limit > fence.MaxLimit:
		return nil, usagef("-n %d: must be 1 to %d", k.limit, fence.MaxLimit)
	}
	return []fence.AcquireOption{fence.WithLimit(k.limit)}, nil
}

// shown is l as the commands print it: with its slot when it is a permit.
func (k *kindFlags) shown(l *fence.Lease) fencehttp.Lease {
	if k != nil && k.permit() {
		return fencehttp.PermitOf(l)
	}
	return fencehttp.LeaseOf(l)
}

// childEnv is what the child of `fence lock` gets for the kind: FENCE_SLOT for
// a permit.
func (k *kindFlags) childEnv(l *fence.Lease) []string {
	if !k.permit() {
		return nil
	}
	return []string{envSlot + "=" + strconv.Itoa(l.Slot())}
}
