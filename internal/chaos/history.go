package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/fencelock/fence"
)

// Kind is the kind of a recorded operation.
type Kind string

// Operation kinds. Only KindFence, KindRead and KindWrite touch the fenced resource
// and are checked for linearizability; acquisitions and releases are counted and
// used to find lock overlaps.
const (
	KindAcquire Kind = "acquire"
	KindFence   Kind = "fence"
	KindRead    Kind = "read"
	KindWrite   Kind = "write"
	KindRelease Kind = "release"
	KindHeal    Kind = "heal" // the worker healed the lock's counter up to Token
)

// Result is how an operation ended.
type Result string

// Results. ResultUnknown means the operation may or may not have taken effect (the
// server died or the request timed out): the checker lets it take effect at any time
// after its invocation, or never.
const (
	ResultOK       Result = "ok"
	ResultRejected Result = "rejected" // the guard refused the fence (stale token)
	ResultFailed   Result = "failed"   // definitely no effect (e.g. lock held, bad request)
	ResultUnknown  Result = "unknown"
)

// Never is the completion time of an operation whose outcome is unknown.
const Never int64 = math.MaxInt64

// Op is one recorded operation, one JSON line in a worker's log.
type Op struct {
	Worker int    `json:"w"`
	Kind   Kind   `json:"op"`
	Key    string `json:"key,omitempty"`
	Lock   string `json:"lock"`
	// Token and Lease are the lease's fence (the lease id is hashed: it is a
	// credential). For writes in a control run they are still the lease's, not the
	// control lock's token that was sent.
	Token fence.Token `json:"token,omitempty"`
	Lease string      `json:"lease,omitempty"`
	// Value is the value written, or the value read ("" when the key has none).
	Value  string `json:"value,omitempty"`
	Result Result `json:"result"`
	Err    string `json:"err,omitempty"`
	// Call and Return are monotonic nanoseconds since the run's start. Return is
	// Never for an unknown outcome. A fence or write retried after an unknown
	// outcome is one Op, from the first call to the last return.
	Call   int64 `json:"call"`
	Return int64 `json:"ret"`
	// Unfenced marks a write sent with the control lock's token (control run).
	Unfenced bool `json:"unfenced,omitempty"`
}

// Fence returns the lease fence the operation carried (or, for an unfenced write,
// should have carried).
func (o Op) Fence() fence.Fence { return fence.Fence{Name: o.Lock, Token: o.Token, LeaseID: o.Lease} }

// ReadHistory parses JSON lines of Ops from r. It returns an error naming the line
// for malformed input. A last line cut short (a worker killed mid-write) is ignored.
func ReadHistory(r io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending error
	for n := 1; sc.Scan(); n++ {
		if pending != nil {
			return nil, pending
		}
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var o Op
		if err := json.Unmarshal(line, &o); err != nil {
			pending = fmt.Errorf("chaos: history line %d: %w", n, err)
			continue
		}
		ops = append(ops, o)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: read history: %w", err)
	}
	return ops, nil
}

// ReadHistoryFile reads a history saved by [WriteHistoryFile] or a worker's log.
func ReadHistoryFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	return ReadHistory(f)
}

// WriteHistoryFile saves ops as JSON lines at path.
func WriteHistoryFile(path string, ops []Op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, o := range ops {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return fmt.Errorf("chaos: save history: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("chaos: save history: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chaos: save history: %w", err)
	}
	return nil
}
