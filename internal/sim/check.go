package sim

import "fmt"

// Violation is an accepted write that breaks the fencing invariant: it carries a
// lower token than a write the resource accepted before it, or the same token under
// another lease.
type Violation struct {
	Write Write // the offending write
	Prev  Write // the earlier write with the highest token at that point
}

// String describes the violation in one line.
func (v Violation) String() string {
	if v.Write.Token == v.Prev.Token {
		return fmt.Sprintf("%s %q: token %d (lease %s) accepted after the same token from another lease (%s)",
			stamp(v.Write.At), v.Write.Resource, v.Write.Token, v.Write.Lease, v.Prev.Lease)
	}
	return fmt.Sprintf("%s %q: token %d (lease %s) accepted after token %d (lease %s, %s)",
		stamp(v.Write.At), v.Write.Resource, v.Write.Token, v.Write.Lease, v.Prev.Token, v.Prev.Lease, stamp(v.Prev.At))
}

// CheckWrites checks the invariant fencing guarantees on a history of accepted
// writes, in the order the resources accepted them: for each resource, every
// write's token is greater than every earlier write's, or equal to the highest so
// far under the same lease. It returns the writes that break it, in history order,
// each with the earlier write it conflicts with; none for a fenced history.
func CheckWrites(writes []Write) []Violation {
	type high struct {
		w  Write
		ok bool
	}
	highest := make(map[string]high) // per resource; lookup only, never iterated
	var out []Violation
	for _, w := range writes {
		h := highest[w.Resource]
		if !h.ok {
			highest[w.Resource] = high{w: w, ok: true}
			continue
		}
		switch {
		case w.Token > h.w.Token:
			highest[w.Resource] = high{w: w, ok: true}
		case w.Token == h.w.Token && w.Lease != "" && w.Lease == h.w.Lease:
			highest[w.Resource] = high{w: w, ok: true}
		default:
			out = append(out, Violation{Write: w, Prev: h.w})
		}
	}
	return out
}

// lostWrites returns the accepted writes whose value was overwritten by a write
// with a lower token: data a fenced resource would have kept.
func lostWrites(writes []Write) []Write {
	last := make(map[string]int) // resource -> index of its last write; lookup only
	var lost []Write
	for i, w := range writes {
		if j, ok := last[w.Resource]; ok && writes[j].Token > w.Token {
			lost = append(lost, writes[j])
		}
		last[w.Resource] = i
	}
	return lost
}
