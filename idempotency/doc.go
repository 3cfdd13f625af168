// Package idempotency makes retries safe where fencing tokens cannot reach: a
// third-party API, or any HTTP endpoint whose side effect must happen once. It
// has three parts.
//
// [Middleware] gives an http.Handler the semantics of the IETF Idempotency-Key
// draft (draft-ietf-httpapi-idempotency-key-header): the first POST or PATCH with
// a key runs and its status, selected headers and body are stored; a retry with the
// same key and payload gets that response again, marked Idempotent-Replayed: true,
// without running the handler; a retry while the first still runs gets 409 with
// Retry-After; the same key with another payload gets 422; a missing key gets 400
// when keys are required. The payload fingerprint is SHA-256 of the method, path,
// query and body ([Fingerprint]). Keys are scoped by the client's identity when
// Options.Identity knows it. 5xx responses are not stored by default (the key is
// released, so a retry runs again); Options.StoreServerErrors changes that.
//
// A [Store] keeps the records: pgstore.Store (package idempotency/pgstore, shared
// by every server on one database; times by the database clock) and
// boltstore.Store (package idempotency/boltstore, embedded, one process). They live
// in packages of their own so that this one links neither pgx nor bbolt.
// A record is in flight, locked for Options.LockTimeout (default 1m), until the
// first request completes; if that request crashed, a retry after the lock timeout
// takes the key over and runs again. Records are kept for Options.Retention
// (default 24h) after they were created or completed; expired records count as
// absent at once and are deleted by a purge the middleware runs at most every
// Options.PurgeEvery (default 10m), or by calling Store.Purge.
//
// [Key] is the client side: it derives the key from the work item (a batch id and
// a line number), never from the fencing token, so that two holders of the same
// batch (the current one and a paused predecessor) send the same key and the
// remote side executes the item once.
//
// The PostgreSQL store's Begin is one statement:
//
//	INSERT INTO idempotency_keys AS r (key, fingerprint, owner, locked_until, expires_at)
//	VALUES ($1, $2, $3, now() + lock, now() + retention)
//	ON CONFLICT (key) DO UPDATE SET ... (a fresh in-flight record)
//	WHERE r.expires_at <= now()
//	   OR (NOT r.done AND r.locked_until <= now() AND r.fingerprint = excluded.fingerprint)
//	RETURNING owner
//
// so of concurrent duplicates exactly one gets the key; the others read the record
// to learn whether it is in flight, completed or another payload's. Complete and
// Release are single UPDATE and DELETE statements conditioned on the owner id, so a
// request whose key was taken over cannot overwrite the new owner's outcome.
package idempotency
