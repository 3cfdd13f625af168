package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Semaphores and shared locks live in the name's one row, with its counter, so
// that a grant of any kind is one statement on one row: PostgreSQL's row lock
// orders concurrent grants, and a grant that waited for the lock re-checks its
// condition on the row as the other grant left it. Such a row has lease '' (no
// lease id is empty), so a plain grant or an older version never takes a
// semaphore's row for a lock's; its leases are the jsonb array holders, each
// {"l": lease id, "t": token, "s": slot, "e": expiry in µs since the epoch, "o":
// owner}, of limit sem_limit (0 for shared) or shared; and expires_at is the last
// of their expiries, so that an exclusive acquire of this version or an older one
// is held while any of them is live, and a revoke (which sets it to -infinity)
// ends them all. A holder is live while its expiry and the row's are after the
// database's clock. waiter_until is the end of the recorded exclusive waiter that
// holds off shared acquires (driver.Decide's rules).

// multiPrefix starts the lease id of a semaphore or shared lease, so that Renew
// and Release pick the statement on the holders without a look at the row, and a
// lock's statements stay those of a lock.
const multiPrefix = "m."

// nowUS is the database's clock in µs since the epoch.
const nowUS = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// expiresUS is the expiry of a lease of $3 milliseconds from now, in µs since the
// epoch (see expiresAt).
const expiresUS = `(` + nowUS + ` + $3::bigint * 1000)`

// fromUS is the timestamptz of us µs since the epoch, exactly.
func fromUS(us string) string {
	return `('epoch'::timestamptz + (` + us + `) * interval '1 microsecond')`
}

// liveHolders is a FROM item and WHERE clause of row l's live holders, as h.
const liveHolders = `jsonb_array_elements(CASE WHEN l.lease = '' AND l.expires_at > clock_timestamp() THEN l.holders END) h
        WHERE (h->>'e')::bigint > ` + nowUS

// multiCols are the columns a look at a row reads after its token, time left
// and owner: whether it holds semaphore or shared leases, their limit and kind,
// the holders (while live), the recorded exclusive waiter's end in µs (0 if
// none) and the database's clock in µs.
const multiCols = `coalesce(lease = '', false), sem_limit, shared,
    CASE WHEN lease = '' AND expires_at > clock_timestamp() THEN holders END,
    CASE WHEN waiter_until > clock_timestamp() THEN (extract(epoch FROM waiter_until) * 1000000)::bigint ELSE 0 END, ` + nowUS

func (l *Locker) buildMultiSQL() {
	t := l.table + ` AS l`
	// A grant: $1 name, $2 lease id, $3 TTL in ms, $4 fence.MaxToken, $5 owner,
	// $6 the watch channel, $7 the limit (0 for shared), $8 shared, $9 the most
	// live leases (the limit, or fence.MaxLimit). The new holder takes the next
	// token and the lowest slot no live holder has; the expired ones are dropped.
	l.multiAcquireSQL = `WITH granted AS (
    INSERT INTO ` + t + ` (name, token, lease, expires_at, owner, sem_limit, shared, holders)
    SELECT $1, 1, '', ` + fromUS("n.e") + `, '', $7, $8,
        jsonb_build_array(jsonb_build_object('l', $2::text, 't', 1, 's', 0, 'e', n.e, 'o', $5::text))
    FROM (SELECT ` + expiresUS + ` AS e) n
    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = '', owner = '', sem_limit = $7, shared = $8,
        (holders, expires_at) = (
            SELECT coalesce(live.hs, '[]') || jsonb_build_array(jsonb_build_object(
                    'l', $2::text, 't', l.token + 1, 's', coalesce(free.s, 0), 'e', n.e, 'o', $5::text)),
                ` + fromUS("greatest(live.e, n.e)") + `
            FROM (SELECT ` + expiresUS + ` AS e) n,
                (SELECT jsonb_agg(h) AS hs, max((h->>'e')::bigint) AS e, array_agg((h->>'s')::int) AS slots
                 FROM ` + liveHolders + `) live,
                LATERAL (SELECT min(s) AS s FROM generate_series(0, $7::int - 1) s
                         WHERE s <> ALL (coalesce(live.slots, '{}'))) free)
    WHERE l.token < $4 AND (NOT $8 OR l.waiter_until <= clock_timestamp())
        AND (l.expires_at <= clock_timestamp() OR (l.lease = '' AND l.sem_limit = $7 AND l.shared = $8
            AND (SELECT count(*) FROM ` + liveHolders + `) < $9))
    RETURNING token, name, holders)
SELECT token, (holders->-1->>'s')::int FROM granted, pg_notify($6, name)`
	// Renew and release of a live holder $2 of $1; $3 is the TTL in ms (renew)
	// or the waiters' channel (release). The row's expiry follows the last holder.
	held := `
WHERE name = $1 AND EXISTS (SELECT FROM ` + liveHolders + ` AND h->>'l' = $2)`
	l.multiRenewSQL = `UPDATE ` + t + ` SET (holders, expires_at) = (
    SELECT jsonb_agg(CASE WHEN h->>'l' = $2 THEN jsonb_set(h, '{e}', to_jsonb(n.e)) ELSE h END),
        ` + fromUS("max(CASE WHEN h->>'l' = $2 THEN n.e ELSE (h->>'e')::bigint END)") + `
    FROM (SELECT ` + expiresUS + ` AS e) n, ` + liveHolders + `)` + held
	l.multiReleaseSQL = `WITH ended AS (
    UPDATE ` + t + ` SET (holders, expires_at) = (
        SELECT jsonb_agg(h), coalesce(` + fromUS("max((h->>'e')::bigint)") + `, '-infinity')
        FROM ` + liveHolders + ` AND h->>'l' <> $2)` + held + `
    RETURNING name)
SELECT pg_notify($3, name) FROM ended`
	// An exclusive acquire waiting for shared holders records itself until $2 ms
	// from now (a longer record of another waiter stands).
	l.markWaiterSQL = `UPDATE ` + t + ` SET waiter_until = greatest(waiter_until, clock_timestamp() + $2::bigint * interval '1 millisecond')
WHERE name = $1 AND lease = '' AND shared AND expires_at > clock_timestamp()`
}

// Features returns the kinds of grant the Locker makes beyond locks: semaphores
// (fence.WithLimit) and shared locks (fence.WithShared).
func (l *Locker) Features() fence.Features { return l.engine.Features }

// isMulti reports whether leaseID is a semaphore or shared lease's.
func isMulti(leaseID string) bool { return strings.HasPrefix(leaseID, multiPrefix) }

// rowKind is what multiCols read of a row.
type rowKind struct {
	multi    bool
	limit    int
	shared   bool
	holders  []byte // jsonb, nil unless multi and live
	waiterUS int64
	nowUS    int64
}

func (k *rowKind) dest() []any {
	return []any{&k.multi, &k.limit, &k.shared, &k.holders, &k.waiterUS, &k.nowUS}
}

func (k *rowKind) now() time.Time { return time.UnixMicro(k.nowUS) }

// waiterUntil is the end of the recorded exclusive waiter, zero if none.
func (k *rowKind) waiterUntil() time.Time {
	if k.waiterUS == 0 {
		return time.Time{}
	}
	return time.UnixMicro(k.waiterUS)
}

// live returns the row's live leases as Holdings: none if it is free (leftMS 0),
// its one lease (token, owner) if it holds a lock, else its holders. It returns
// ErrCorrupt for holders the Locker never writes.
func (k *rowKind) live(token, leftMS int64, owner string) ([]driver.Holding, error) {
	now := k.now()
	switch {
	case leftMS <= 0:
		return nil, nil
	case !k.multi:
		return []driver.Holding{{Token: fence.Token(token), Owner: owner, Expires: now.Add(time.Duration(leftMS) * time.Millisecond)}}, nil
	}
	var hs []struct {
		L string `json:"l"`
		T int64  `json:"t"`
		S int    `json:"s"`
		E int64  `json:"e"`
		O string `json:"o"`
	}
	if err := json.Unmarshal(k.holders, &hs); err != nil && k.holders != nil {
		return nil, fmt.Errorf("%w: the holders of the lock row: %v", ErrCorrupt, err)
	}
	live := make([]driver.Holding, 0, len(hs))
	for _, h := range hs {
		if h.T < 1 || h.T > token || h.S < 0 || h.S >= max(k.limit, 1) {
			return nil, fmt.Errorf("%w: a holder with token %d (counter %d) or slot %d (limit %d) in the lock row", ErrCorrupt, h.T, token, h.S, k.limit)
		}
		live = append(live, driver.Holding{ID: h.L, Token: fence.Token(h.T), Owner: h.O, Slot: h.S, Limit: k.limit, Shared: k.shared, Expires: time.UnixMicro(h.E)})
	}
	return live, nil
}

// markWaiter records an exclusive acquire waiting for shared holders, for
// driver.WaiterFor(r).
func (l *Locker) markWaiter(ctx context.Context, r *driver.Request) error {
	_, err := l.pool.Exec(ctx, l.markWaiterSQL, r.Name, driver.WaiterFor(r).Milliseconds())
	return dbErr(err)
}
