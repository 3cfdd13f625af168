//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fence/idempotency"
)

// chargeRequest is the body of POST /v1/charges. It names the payout, never the
// instance sending it: the body is part of the idempotency fingerprint, and two
// instances paying the same line must send the same payload.
type chargeRequest struct {
	Payout      string `json:"payout"` // "batch/line"
	AmountCents int64  `json:"amount_cents"`
}

// chargeResponse is the provider's answer to a charge.
type chargeResponse struct {
	ChargeID string `json:"charge_id"`
}

// headerInstance tells the provider which instance calls, so the coordinator can
// pause that instance's process while its charge is in flight. It is not part of
// the fingerprint (headers never are).
const headerInstance = "X-Payments-Instance"

// provider is the stand-in payment provider: it charges every request its handler
// runs, counting charges per payout, behind the idempotency Middleware (which
// replays a stored response, without charging again, for a key it has seen).
type provider struct {
	srv *http.Server
	ln  net.Listener

	// onCharge is called after a charge is made and before the response is sent,
	// with the calling instance and the payout's line (the chaos hook).
	onCharge func(instance, line int)

	mu      sync.Mutex
	next    int
	charges map[string]int // payout -> number of charges
}

// startProvider serves the provider on a free port of 127.0.0.1 with the
// idempotency middleware over store. It returns an error if it cannot listen.
func startProvider(store idempotency.Store, onCharge func(instance, line int)) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("payments: provider listen: %w", err)
	}
	p := &provider{ln: ln, onCharge: onCharge, charges: make(map[string]int)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.charge)
	// LockTimeout is far above any pause of this program: a retry must never take
	// over a charge that is in fact still running.
	mw := idempotency.Middleware(store, idempotency.Options{LockTimeout: 5 * time.Minute})
	p.srv = &http.Server{Handler: mw(mux), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln) //nolint:errcheck // returns http.ErrServerClosed on Close
	return p, nil
}

// URL returns the provider's base URL.
func (p *provider) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the provider.
func (p *provider) Close() error { return p.srv.Close() }

// charge is the provider's side effect: one call, one charge.
func (p *provider) charge(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Payout == "" || req.AmountCents <= 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"bad charge request: want {\"payout\": \"batch/line\", \"amount_cents\": N > 0}"}`+"\n") //nolint:errcheck // client gone
		return
	}
	p.mu.Lock()
	p.next++
	id := fmt.Sprintf("ch_%06d", p.next)
	p.charges[req.Payout]++
	p.mu.Unlock()

	if p.onCharge != nil {
		inst, _ := strconv.Atoi(r.Header.Get(headerInstance))
		p.onCharge(inst, lineOf(req.Payout))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(chargeResponse{ChargeID: id}) //nolint:errcheck // client gone: nothing to do
}

// lineOf returns the line number at the end of a "batch/line" payout id, or 0.
func lineOf(payout string) int {
	for i := len(payout) - 1; i >= 0; i-- {
		if payout[i] == '/' {
			n, _ := strconv.Atoi(payout[i+1:])
			return n
		}
	}
	return 0
}

// chargeCounts returns how many times each payout was charged.
func (p *provider) chargeCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.charges))
	for k, v := range p.charges {
		out[k] = v
	}
	return out
}

// providerClient is an instance's client of the provider.
type providerClient struct {
	base     string
	instance int
	idem     bool // send Idempotency-Key
	http     *http.Client
}

// errProvider wraps every failure of a charge call.
var errProvider = errors.New("payments: provider")

// charge pays line of batch and returns the charge id and whether the provider
// replayed an earlier charge. With idempotency on, the key is derived from the batch
// and the line only (idempotency.Key), so every instance paying that line sends the
// same key. A 409 (the same key still in flight) is retried after Retry-After.
func (c *providerClient) charge(ctx context.Context, batch string, line int) (string, bool, error) {
	body, err := json.Marshal(chargeRequest{Payout: fmt.Sprintf("%s/%d", batch, line), AmountCents: amount(line)})
	if err != nil {
		return "", false, fmt.Errorf("%w: encode charge: %v", errProvider, err)
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/charges", bytes.NewReader(body))
		if err != nil {
			return "", false, fmt.Errorf("%w: %v", errProvider, err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(headerInstance, strconv.Itoa(c.instance))
		if c.idem {
			req.Header.Set(idempotency.HeaderKey, idempotency.Key(batch, strconv.Itoa(line)))
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return "", false, fmt.Errorf("%w: charge line %d: %v", errProvider, line, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if err != nil {
			return "", false, fmt.Errorf("%w: charge line %d: read answer: %v", errProvider, line, err)
		}
		switch {
		case resp.StatusCode == http.StatusCreated:
			var cr chargeResponse
			if err := json.Unmarshal(data, &cr); err != nil || cr.ChargeID == "" {
				return "", false, fmt.Errorf("%w: charge line %d: bad answer %q", errProvider, line, data)
			}
			return cr.ChargeID, resp.Header.Get(idempotency.HeaderReplayed) == "true", nil
		case resp.StatusCode == http.StatusConflict && attempt < 50:
			wait := 200 * time.Millisecond
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = time.Duration(s) * time.Second
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", false, fmt.Errorf("%w: charge line %d: %v", errProvider, line, ctx.Err())
			case <-t.C:
			}
		default:
			return "", false, fmt.Errorf("%w: charge line %d: status %d: %s", errProvider, line, resp.StatusCode, data)
		}
	}
}
