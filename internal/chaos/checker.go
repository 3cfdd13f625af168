package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fence"
)

// Report is what [Check] found in a history.
type Report struct {
	Operations     int // operations recorded, of every kind
	Acquisitions   int // leases granted
	Writes         int // writes acknowledged as accepted
	StaleRejected  int // writes and fences the guard refused (a stale holder or a regressed counter fenced off)
	StaleAccepted  int // accepted writes or fences whose lease fence a guard had to refuse: must be 0
	Lost           int // acknowledged increments missing from the final value: must be 0
	RejectedSeen   int // reads that returned the value of a rejected write: must be 0
	Overlaps       int // pairs of leases whose holders both believed they held the lock at once
	Unknown        int // operations with an unknown outcome (server killed mid-request)
	Linearizable   porcupine.CheckResult
	Violations     []string // one line per violation found, for the log
	linearInfo     porcupine.LinearizationInfo
	resourceEvents []porcupine.Operation
}

// OK reports whether the history shows no violation and was proven linearizable.
func (r *Report) OK() bool {
	return len(r.Violations) == 0 && r.Linearizable == porcupine.Ok
}

// Found reports whether a violation was proven (the outcome a control run needs):
// an invariant broken or a history proven not linearizable. A linearizability check
// that timed out proves nothing either way.
func (r *Report) Found() bool {
	return r.StaleAccepted+r.Lost+r.RejectedSeen > 0 || r.Linearizable == porcupine.Illegal
}

// CheckOptions tunes [Check].
type CheckOptions struct {
	// Timeout bounds the linearizability search; 0 means one minute. When it runs
	// out the result is porcupine.Unknown, which Report.OK treats as a failure.
	Timeout time.Duration
}

// regInput is the input of a fenced-register operation.
type regInput struct {
	Kind  Kind
	Fence fence.Fence
	Value string // written value
}

// regOutput is the output of a fenced-register operation.
type regOutput struct {
	Result Result
	Value  string // read value
}

// regState is the state of one fenced register: its value and the highest fence it
// accepted. It is comparable, so porcupine's == applies.
type regState struct {
	Value   string
	Highest fence.Fence
}

// RegisterModel returns the porcupine model of a fenced register, partitioned by key
// (the Metadata of each operation is its key). A write or fence is legal only if
// its output agrees with fence.Admit against the highest fence accepted so far: an
// accepted one must be admitted (and becomes the highest), a rejected one must be
// refused (and changes nothing). An operation of unknown outcome may take effect (if
// admitted) or not, anywhere between its call and its return (Never when it stayed
// unknown). A read must return the current value.
func RegisterModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []interface{} { return []interface{}{regState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			st := state.(regState)
			in := input.(regInput)
			out := output.(regOutput)
			if in.Kind == KindRead {
				if out.Value == st.Value {
					return []interface{}{st}
				}
				return nil
			}
			admitted := fence.Admit("chaos", st.Highest, in.Fence) == nil
			next := st
			next.Highest = in.Fence
			if in.Kind == KindWrite {
				next.Value = in.Value
			}
			switch {
			case out.Result == ResultOK && admitted:
				return []interface{}{next}
			case out.Result == ResultRejected && !admitted:
				return []interface{}{st}
			case out.Result == ResultUnknown && admitted:
				return []interface{}{next, st} // it happened, or it did not
			case out.Result == ResultUnknown:
				return []interface{}{st}
			}
			return nil
		},
		DescribeOperation: describeOp,
		DescribeState: func(state interface{}) string {
			st := state.(regState)
			return fmt.Sprintf("%q, highest #%d %s", st.Value, st.Highest.Token, st.Highest.LeaseID)
		},
		DescribeOperationMetadata: func(info interface{}) string {
			k, _ := info.(string)
			return "key " + k
		},
	}
	return nm.ToModel()
}

func partitionByKey(h []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, o := range h {
		k, _ := o.Metadata.(string)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], o)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describeOp(input, output interface{}) string {
	in := input.(regInput)
	out := output.(regOutput)
	switch in.Kind {
	case KindRead:
		return fmt.Sprintf("read() -> %q", out.Value)
	case KindFence:
		return fmt.Sprintf("fence(#%d %s) -> %s", in.Fence.Token, in.Fence.LeaseID, out.Result)
	}
	return fmt.Sprintf("write(#%d %s, %q) -> %s", in.Fence.Token, in.Fence.LeaseID, in.Value, out.Result)
}

// counterOf parses the counter at the start of a worker's value "N:wW:S"; ok is
// false for a value of another shape.
func counterOf(v string) (n int, ok bool) {
	head, _, _ := strings.Cut(v, ":")
	n, err := strconv.Atoi(head)
	return n, err == nil
}

// Check verifies a history (the union of the workers' logs and the harness's final
// reads, which have Worker -1). It returns a Report; violations are listed in
// Report.Violations and counted in its fields. The error is non-nil only when the
// history cannot be checked (an operation of an unknown kind or result).
func Check(ops []Op, opts CheckOptions) (*Report, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	r := &Report{Operations: len(ops)}
	var res []Op // operations on the fenced resources
	for i, o := range ops {
		switch o.Result {
		case ResultOK, ResultRejected, ResultFailed, ResultUnknown:
		default:
			return nil, fmt.Errorf("chaos: check: op %d: unknown result %q", i, o.Result)
		}
		if o.Result == ResultUnknown {
			r.Unknown++
		}
		switch o.Kind {
		case KindAcquire:
			if o.Result == ResultOK {
				r.Acquisitions++
			}
		case KindRelease, KindHeal:
		case KindFence, KindWrite, KindRead:
			if o.Result == ResultFailed {
				continue // no effect, nothing observed
			}
			if o.Kind == KindRead && o.Result != ResultOK {
				continue // a read that did not return observed nothing
			}
			if o.Result == ResultUnknown && o.Return < o.Call {
				o.Return = Never
			}
			res = append(res, o)
		default:
			return nil, fmt.Errorf("chaos: check: op %d: unknown kind %q", i, o.Kind)
		}
	}
	r.checkStale(res)
	r.checkRejectedSeen(res)
	r.checkLost(res)
	r.Overlaps = overlaps(ops)

	hist := make([]porcupine.Operation, 0, len(res))
	for _, o := range res {
		id := o.Worker
		if id < 0 {
			id = 0 // the harness's final reads come after every worker's op
		}
		hist = append(hist, porcupine.Operation{
			ClientId: id,
			Input:    regInput{Kind: o.Kind, Fence: o.Fence(), Value: o.Value},
			Call:     o.Call,
			Output:   regOutput{Result: o.Result, Value: o.Value},
			Return:   o.Return,
			Metadata: o.Key,
		})
	}
	r.resourceEvents = hist
	r.Linearizable, r.linearInfo = porcupine.CheckOperationsVerbose(RegisterModel(), hist, opts.Timeout)
	switch r.Linearizable {
	case porcupine.Illegal:
		r.Violations = append(r.Violations, "history is not linearizable as a fenced register")
	case porcupine.Unknown:
		r.Violations = append(r.Violations, fmt.Sprintf("linearizability check timed out after %v", opts.Timeout))
	}
	return r, nil
}

// checkStale counts accepted writes and fences that Admit refuses against the
// highest fence accepted by an operation that completed before they were invoked
// (real-time order, so no search is needed). Rejected writes and fences are counted
// too.
func (r *Report) checkStale(res []Op) {
	var acc []Op
	for _, o := range res {
		if o.Kind != KindRead && o.Result == ResultRejected {
			r.StaleRejected++
		}
		if o.Kind != KindRead && o.Result == ResultOK {
			acc = append(acc, o)
			if o.Kind == KindWrite {
				r.Writes++
			}
		}
	}
	byKey := map[string][]Op{}
	for _, o := range acc {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	for key, ops := range byKey {
		byRet := append([]Op(nil), ops...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
		byCall := append([]Op(nil), ops...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
		var highest fence.Fence
		j := 0
		for _, o := range byCall {
			for j < len(byRet) && byRet[j].Return < o.Call {
				if byRet[j].Token > highest.Token {
					highest = byRet[j].Fence()
				}
				j++
			}
			if err := fence.Admit(key, highest, o.Fence()); err != nil {
				r.StaleAccepted++
				r.Violations = append(r.Violations, fmt.Sprintf("stale %s accepted: worker %d, key %q, token %d after token %d was accepted",
					o.Kind, o.Worker, key, o.Token, highest.Token))
			}
		}
	}
}

// checkRejectedSeen counts reads that returned a value only a rejected write wrote.
func (r *Report) checkRejectedSeen(res []Op) {
	rejected := map[string]bool{}
	for _, o := range res {
		if o.Kind == KindWrite && o.Result == ResultRejected {
			rejected[o.Key+"\x00"+o.Value] = true
		}
	}
	for _, o := range res {
		if o.Kind == KindRead && o.Value != "" && rejected[o.Key+"\x00"+o.Value] {
			r.RejectedSeen++
			r.Violations = append(r.Violations, fmt.Sprintf("rejected write visible: worker %d read %q from key %q", o.Worker, o.Value, o.Key))
		}
	}
}

// checkLost compares, per key with a final read by the harness, the final counter
// with the number of acknowledged increments (each accepted write stores the value it
// read plus one, so a counter below the count lost acknowledged writes), and the
// final value with the last accepted write (or a write of unknown outcome after it).
func (r *Report) checkLost(res []Op) {
	final := map[string]Op{}
	for _, o := range res {
		if o.Kind == KindRead && o.Worker < 0 {
			if f, ok := final[o.Key]; !ok || o.Call > f.Call {
				final[o.Key] = o
			}
		}
	}
	for key, fr := range final {
		acked := 0
		var last Op
		maybe := map[string]bool{}
		for _, o := range res {
			if o.Key != key || o.Kind != KindWrite {
				continue
			}
			switch o.Result {
			case ResultOK:
				acked++
				if last.Token == 0 || o.Token > last.Token || (o.Token == last.Token && o.Return > last.Return) {
					last = o
				}
			case ResultUnknown:
				maybe[o.Value] = true
			}
		}
		n, ok := 0, fr.Value == ""
		if fr.Value != "" {
			n, ok = counterOf(fr.Value)
		}
		if !ok {
			r.Lost++
			r.Violations = append(r.Violations, fmt.Sprintf("final value of key %q is %q, not a worker's counter", key, fr.Value))
			continue
		}
		if acked > n {
			r.Lost += acked - n
			r.Violations = append(r.Violations, fmt.Sprintf("acknowledged writes lost: key %q counts %d, %d increments were acknowledged", key, n, acked))
		}
		if acked > 0 && fr.Value != last.Value && !maybe[fr.Value] {
			if acked <= n {
				r.Lost++
			}
			r.Violations = append(r.Violations, fmt.Sprintf("final value of key %q is %q, the last accepted write (token %d) wrote %q", key, fr.Value, last.Token, last.Value))
		}
	}
}

// overlaps counts pairs of leases held by different workers whose holding intervals
// (from the acquire's completion to the release's invocation, or to the worker's
// last operation under that lease) intersect: a holder paused past its TTL still
// believed it held the lock when the next one got it.
func overlaps(ops []Op) int {
	type hold struct {
		worker     int
		start, end int64
	}
	byLease := map[string]*hold{}
	var holds []*hold
	for _, o := range ops {
		if o.Lease == "" || o.Worker < 0 {
			continue
		}
		k := o.Lock + "\x00" + o.Lease
		h := byLease[k]
		if o.Kind == KindAcquire {
			if o.Result == ResultOK {
				h = &hold{worker: o.Worker, start: o.Return, end: o.Return}
				byLease[k] = h
				holds = append(holds, h)
			}
			continue
		}
		if h == nil {
			continue
		}
		end := o.Return
		if o.Kind == KindRelease || end == Never {
			end = o.Call
		}
		if end > h.end {
			h.end = end
		}
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].start < holds[j].start })
	n := 0
	for i, a := range holds {
		for _, b := range holds[i+1:] {
			if b.start >= a.end {
				break
			}
			if b.worker != a.worker {
				n++
			}
		}
	}
	return n
}

// SaveFailure writes the history (history.jsonl) and porcupine's HTML visualisation
// of the linearizability check (history.html) into dir, creating it. It returns the
// paths written, or an error matching the file system's.
func SaveFailure(dir string, ops []Op, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: results: %w", err)
	}
	hp := filepath.Join(dir, "history.jsonl")
	if err := WriteHistoryFile(hp, ops); err != nil {
		return nil, err
	}
	paths := []string{hp}
	if r != nil && r.Linearizable != "" {
		vp := filepath.Join(dir, "history.html")
		if err := porcupine.VisualizePath(RegisterModel(), r.linearInfo, vp); err != nil {
			return paths, fmt.Errorf("chaos: visualise: %w", err)
		}
		paths = append(paths, vp)
	}
	if r != nil && len(r.Violations) > 0 {
		vp := filepath.Join(dir, "violations.txt")
		if err := os.WriteFile(vp, []byte(strings.Join(r.Violations, "\n")+"\n"), 0o644); err != nil {
			return paths, fmt.Errorf("chaos: results: %w", err)
		}
		paths = append(paths, vp)
	}
	return paths, nil
}
