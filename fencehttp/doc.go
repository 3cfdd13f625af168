// Package fencehttp is fence over HTTP: a Server that exposes any fence.Locker (and,
// optionally, a fenced fence.KV store) as the HTTP API v1 that `fence serve` runs,
// and a Client that implements fence.Locker, fence.Healer, fence.Revoker,
// fence.Inspector, fence.Watcher, fence.Guard and fence.KV against such a server,
// so that any language or shell can take fenced locks.
//
// The package is named fencehttp, not http, so that it does not shadow net/http
// where both are imported.
//
// The Server is the HTTP adapter of the lock service (the module's internal
// service package): it holds the routes, JSON bodies, headers and statuses; the
// rules below (fair queues, scopes, request ids, the checks of fenced writes,
// drain, metrics, error codes) are the service's, which every wire of a
// process shares (Server.Service), so that their waiters share one queue per
// name.
//
// # API v1
//
//	POST /v1/locks/{name}/acquire  {"ttl_ms":N,"wait_ms":N,"owner":S,"limit":N,"shared":B}
//	                      -> 200 {"name","token","lease","ttl_ms","waited_ms"[,"slot"]}
//	                         | 409 held (after the wait; expires_in_ms as of its end) | 409 limit_mismatch | 501
//	POST /v1/locks/{name}/renew    {"lease":ID,"ttl_ms":N}  -> 200 | 410 lease expired or lost
//	POST /v1/locks/{name}/release  {"lease":ID}             -> 200 | 410
//	                      or {"request_id":S,"ttl_ms":N[,"limit":N,"shared":B]}: abandon
//	                         that acquire's grant (see Waiting) -> 200 | 410 | 501
//	POST /v1/locks/{name}/revoke   {}                       -> 200 {"name","revoked":true} | 404 not_held | 501
//	POST /v1/locks/{name}/heal     {"seen":N}               -> 200 | 501 (fence.Healer, P4)
//	                         | 400 {"code":"invalid","field":"seen","name","last","bound":4294967296}
//	                           (seen more than fence.MaxHealAhead above the lock's last token);
//	                         a heal raises only this lock's tokens, never another's
//	GET  /v1/locks/{name}[?index=N&wait_ms=W]
//	                      -> 200 {"name","held","token","owner","last_token","expires_in_ms"
//	                         [,"limit"|"shared","holders":[{"slot","token","owner","expires_in_ms"}]]},
//	                         header Fence-Index; with index, a blocking query (see Watching)
//	GET  /v1/locks?prefix=P&limit=N[&all=true]
//	                      -> 200 {"locks":[...]}: the held locks; all=true every name the
//	                         store knows, free ones too | 400 {"code":"invalid","field":"all"}
//	PUT  /v1/kv/{key}     headers Fence-Token: N, Fence-Lock: NAME [, Fence-Lease: ID]
//	                      -> 200 {"key","lock","token"} | 409 {"error","code","highest"}
//	                         | 400 (Fence-Lock missing: {"code":"invalid","field":"Fence-Lock"})
//	GET  /v1/kv/{key}     -> 200 the value, headers Fence-Token and Fence-Lock
//	                         | 404 (no value: never written, only fenced or deleted;
//	                         the fence headers are set when the key has a fence)
//	DELETE /v1/kv/{key}   headers as for PUT: remove the value, keep the fence
//	                      -> 200 {"key","lock","token"} | 404 (no value) | 409 | 400
//	DELETE /v1/kv/{key}?purge=true  no fence headers (admin): value and fence go
//	                      -> 200 {"key","purged":true} | 404 (neither) | 400
//	POST /v1/fences/{key} headers as for PUT, no body: advance the key's fence only
//	GET  /healthz         -> 200 {"status":"ok"}, 503 while shutting down (never needs auth)
//	GET  /readyz          -> 200 {"status":"ready"} while this server can grant (Config.Ready:
//	                         in cluster mode, while its node sees a leader), 503 "unavailable"
//	                         saying why not, or while shutting down (never needs auth)
//	GET  /metrics         -> Prometheus text format
//	GET  /v1/openapi.json -> the OpenAPI 3.1 document of this API (see OpenAPI)
//	GET  /ui              -> the live dashboard (package ui; its files need no auth)
//	GET  /                -> 302 to /ui (needs no auth)
//
// In cluster mode (Config.Cluster: fence serve --node), and 404 "not_found" otherwise:
//
//	GET    /v1/cluster                 -> 200 {"members":[{"name","peer","leader","healthy","api"}]}
//	POST   /v1/cluster/members         {"name","peer"} (admin) -> 200 the members | 400 | 503
//	DELETE /v1/cluster/members/{name}  (admin) -> 200 the members | 404 unknown member | 503
//	GET    /v1/cluster/snapshot        (admin) -> 200 application/octet-stream: the store's snapshot
//
// The OpenAPI document describes every route, header, status and error code above
// and is checked against the server by this package's tests. HEAD is answered as GET
// without a body, and a method a route does not serve is 405 "method_not_allowed"
// with an Allow header that lists exactly the methods it serves: GET, HEAD for
// /v1/locks/{name}, POST for each action.
//
// Bodies are JSON; durations are integer milliseconds. An omitted ttl_ms means 30000
// (Config.DefaultTTL); an omitted wait_ms means 0 (try once). Unknown fields and
// trailing data are rejected with 400, so that a typo is not silently ignored.
//
// Names and keys are path segments: a client escapes them (a '/' in a name is sent as
// %2F, so any valid name round-trips; see EscapeName). The server also accepts
// unescaped slashes (POST /v1/locks/jobs/nightly/acquire is the lock "jobs/nightly").
// Under /v1/locks/, when the last raw (escaped) segment of the path is an action word
// (acquire, renew, release, revoke, heal), the path is that action's route on the name
// before it, whatever the method: GET /v1/locks/x/acquire is 405 with Allow: POST,
// never the state of a lock "x/acquire". A lock whose name ends in such a segment is
// sent with that slash escaped, x%2Facquire, as EscapeName (and every client) sends
// it. Any other path under /v1/locks/ is a lock's own route: /v1/locks/acquire is the
// lock "acquire", and POST /v1/locks/x/bogus is 405 (Allow: GET, HEAD) on the lock
// "x/bogus". An escaped action word after an unescaped slash (x/acqu%69re) is 400:
// a proxy that normalises escapes would make it the action's route. The router and
// the scope check of scoped tokens read a path with the same parser.
//
// A path with an empty segment (//) or a dot segment (. or ..) is answered 400
// "invalid", never redirected: path cleaning would make /v1/locks/a/../b/acquire the
// lock "b", and a client following the redirect would take a lock it never named.
// The same holds for escaped dots (%2E%2E) in a name or key sent with unescaped
// slashes, since URL normalisation treats %2E as '.'. Names with such parts travel
// as one escaped segment, as EscapeName makes them: a%2F..%2Fb is the lock "a/../b",
// and %2E%2E the lock "..".
//
// # Owners and revoke
//
// An acquire may name its holder, "owner" (fence.WithOwner: at most 256 bytes of
// printable UTF-8; a bad one is 400 with field "owner"). GET /v1/locks/{name} and
// the listing report it while the lease is held, never the lease id. An owner is a
// label for people, not a credential: anyone may claim any owner.
//
// POST /v1/locks/{name}/revoke ends the current lease now, whoever holds it, and
// wakes the waiters (fence.Revoker; 501 if the store has none, 404 "not_held" if no
// unexpired lease holds the lock). The revoked holder's renew and release are then
// 410. Revoke is safe only where the resource is fenced: the next grant's token is
// higher, so once the next holder writes or fences (POST /v1/fences/{key}) any
// guard refuses the revoked holder's writes (P1, P3); until then a paused revoked
// holder can still write with its token. With auth tokens, revoke needs the admin
// right (see Security).
//
// # Semaphores and shared locks
//
// "limit":N (fence.WithLimit, 1 to fence.MaxLimit; 1 is a lock) makes the name a
// semaphore of N permits: the answer's "slot" is the permit's, in [0, N), which no
// other live permit has. "shared":true (fence.WithShared) asks for a shared lease;
// it cannot be combined with a limit above 1 (400). Every grant takes the name's
// next token, so the same guards fence them. The state of a semaphore or shared
// lock has "limit" or "shared" and "holders", every live lease (slot, token, owner,
// time left; never the lease id), with token, owner and expires_in_ms those of the
// holder with the highest token. A semaphore whose permits are all held answers 409
// "held" with "limit". An acquire whose limit differs from the live leases' (a lock
// and a shared lease count as 1) is 409 "limit_mismatch" with "limit" and
// "held_limit", a *fence.LimitError for the Client (matching fence.ErrInvalid): 409
// rather than 400, because the request is well formed and the same one succeeds once
// the live leases end. A store without the kind (fence.FeaturesOf) answers 501. The
// Client declares both kinds (fence.FeatureLocker) and sends what it is asked for.
//
// # Waiting
//
// An acquire with wait_ms is a long poll: the request stays open until the lock is
// granted (woken by the release, through the store's own wake-up), the wait ends
// (409), the client goes away, or the server drains (503). The server caps one poll
// at Config.MaxWait (60s by default); the Client polls again until its own wait is
// over, so fence.WaitForever works. A grant made just as its client went away is
// released at once if its acquire had no request_id. One with a request_id is
// never released unconditionally by the attempt that lost its answer, whatever
// the store declares: the client may be retrying on another server (its attempt
// timed out, its connection was reset), and that retry finds the grant by its
// request id and returns it with a full TTL. A store that records which grants
// a retry claimed (driver.UnclaimedReleaser: inmem, bolt, etcd) claims the grant
// in the operation that returns it to the retry, and the server releases the
// grant only if nobody claimed it, in one store operation serialized with the
// claim: so a grant whose client is gone for good (killed, or one that never
// retries) frees the lock at once, and a retried one stays its holder's. On
// any other store it is left to expire. It is also ended by its holder, or by
// the client's abandon: POST /v1/locks/{name}/release with
// {"request_id","ttl_ms"[,"limit"|"shared"]} instead of {"lease"}, which the
// Client sends when it gives up on an acquire whose outcome it does not know
// (its wait ended mid-poll, no server answered), so that a waiter giving up
// just as it is granted costs the queue behind it no TTL. The server releases
// the live grant of that request id, found as a retry would find it (410 if
// none, 501 if the store keeps no request ids); an attempt granted after the
// abandon was served is released by its server if nobody claimed it, else it
// expires.
//
// Waiters are served in the order they arrived (P10): the waiting acquires of a
// name queue in the server, only the head of the queue tries the store, and a
// waiter that gives up (its wait over, its client gone) leaves the queue at once,
// handing the turn to the next. While a name has waiters no new acquire tries
// first: a waiting one joins the end of the queue, and one without a wait
// (wait_ms 0) is answered 409 held at once, even at the instant the lock is free
// between a release and the head's grant. Semaphores and shared locks queue the
// same way, one try at a time; the store then decides what each head gets. The
// order holds per server process: with --store shared by several servers, each
// server orders its own waiters only, and the store decides between the heads of
// the servers' queues. It holds within one long poll: a wait longer than
// Config.MaxWait (the Client's ClientOptions.MaxPoll) is several polls, and each
// new poll joins the end of the queue.
//
// A waiting acquire rides out a store that is unavailable for a while (a
// cluster electing its leader): a try that fails with fence.ErrUnavailable while
// the wait has time left does not end the request, which waits on in the
// store's waiting acquire (driver.Transient) and is granted once the store
// answers again. Only when the wait ends first is it answered 503, with the
// store's reason when it gives one (fence.UnavailableError: "acquire "job1":
// store unavailable: the cluster has no leader"). The Client, in turn, retries
// a 503 within its own wait.
//
// The answer's waited_ms (rounded down) is the time from when the server got the
// request to when it sent the store the request that granted the lease, which is
// when the store started counting the TTL (a fence.Lease's deadline is that time
// plus the TTL). A client adds it to the time it sent its request: its deadline is
// then never later than the store's expiry, however long the store took to
// acknowledge the grant (an fsync, a Redis WAIT, a Raft commit), and a grant at the
// end of a long poll still gets its whole TTL. A 409 after a wait reports the time
// the holder's lease has left when the wait ended (expires_in_ms, and in the message).
//
// Each waiting request, long poll or blocking query, holds a connection (or an
// HTTP/2 stream) and its handler at the server. Config.MaxWaiters (`fence serve
// --max-waiters`) caps how many wait at once, and one more is answered 503 at once,
// with Retry-After.
//
// # Watching
//
// Every answer of GET /v1/locks/{name} carries the lock's change index in the
// Fence-Index header (fence.LockInfo.Index: 2*last_token, plus 1 while the lock is
// free). With ?index=N it is a blocking query, as Consul's: the server answers at
// once if the lock's index differs from N (N=0 differs from every index), else when
// the lock next changes (an acquire, release, expiry, revoke or heal), or after
// wait_ms with the state as it is then; both are 200, and the client compares
// Fence-Index. wait_ms defaults to 30000 (DefaultBlockingWait) and is cut to
// Config.MaxWait, as an acquire's wait is; it is refused without index. A bad index
// or wait_ms is 400 naming it; a store that is not a fence.Watcher answers blocking
// queries 501; while the server drains, a blocking query that would wait ends with
// 503. fence_blocking_queries_in_flight counts the queries waiting. Each query
// follows the lock with its store's Watch: on the embedded store (and inmem) a
// subscription in memory; on a network store what that store's Watch costs.
//
// Client.Watch (fence.Watcher) loops on blocking queries with the last
// Fence-Index, asking the server to wait MaxPoll each time. Its watch of a server
// older than blocking queries (no Fence-Index) ends with ErrNotImplemented.
//
// # HTTP/2
//
// The API is the same over HTTP/1.1 and HTTP/2. `fence serve` negotiates HTTP/2
// over TLS (ALPN) and accepts HTTP/2 without TLS with prior knowledge (h2c) beside
// HTTP/1.1. The Client speaks HTTP/2 to an https server that offers it, and h2c
// with ClientOptions.H2C. One request is one request in every protocol: the bytes
// of a request's body are never read as another request.
//
// # The fenced KV store and the Fence-Lock header
//
// A fence is a lock name (the namespace of its token counter), a token and a lease
// id. Every fenced write (PUT /v1/kv/{key}, POST /v1/fences/{key}) carries the token
// in Fence-Token and the lock name in Fence-Lock, both required, and the lease id in
// Fence-Lease (optional; without it an equal token is refused, as fence.Admit says).
// A write without Fence-Lock is refused with 400 (code "invalid", field
// "Fence-Lock"), also on a key that a lock already fences: the server never guesses
// the lock, because a token of another lock's counter compared as if it were the
// key's lock's would pass or fail by accident. With the lock named, a token of
// another lock is refused (409, code "wrong_lock"). Fence-Lock is URL-escaped like a
// path segment (plain names are unchanged by that), and GET /v1/kv answers with it
// escaped the same way.
//
// Where the server's store grants the locks it fences with (P9: the embedded
// store; each store's documentation says exactly what it checks), a fenced write
// or delete whose token is above the last one issued for Fence-Lock, names a lock
// never granted, or carries a Fence-Lease other than the lease the token was
// issued to, is refused with 409 "unissued_token" ({"lock","token","last"}, and
// "other_lease":true for the lease) and writes nothing: a typo cannot fence the
// real holder out. The Client sends Fence-Lease whenever the fence has a lease id,
// and turns the answer back into a *fence.UnissuedTokenError.
//
// Such a store also refuses a fenced write or delete without Fence-Lease whose
// token belongs to a live lease, with 409 "lease_required" ({"key","lock",
// "token"}), and writes nothing: the token is public (GET /v1/locks/{name} shows
// it), and stored without a lease such a fence would refuse the holder's own
// writes under its token. Once that lease has ended (released, revoked or
// expired, as the store judges it), the token without Fence-Lease is admitted as
// fence.Admit admits it: no live holder is left to fence out, every later grant's
// token is higher, and the ended lease's own writes with that token are then
// stale. The Client turns the answer into a *fence.LeaseRequiredError.
//
// DELETE removes a key's value and keeps its fence (the delete's own), so a stale
// writer is still refused; GET then answers 404 with the fence headers, which the
// Client returns as a nil value and the fence, as every fence.KV does. A purge
// (DELETE ?purge=true, admin) removes value and fence: the one way a key's fence
// goes back, for a key fenced by the wrong lock.
//
// # Write attempts: the Fence-Attempt header
//
// A PUT or DELETE may carry Fence-Attempt, an attempt id naming the logical
// write across its retries (fence.WithWriteAttempt). The server passes it to
// its store, which claims it for the key in the same step as the write; a later
// attempt with the same id and fence, while that fence is still the key's, is
// answered 200 as that write's success and writes nothing. So a first attempt
// that lands late never replaces a write the holder made after its retry (P3).
// The Client sends one per Put and Delete (the id the context names, or 128
// random bits). A write without the header gets no protection against its own
// late attempt. A malformed or repeated header is 400 "invalid".
//
// # Errors
//
// Every error is JSON {"error":"...","code":"..."} with one status per cause (one
// table in the server, matched with errors.Is on the fence sentinels). "error" is the
// one line a user should read, each fact once, without the server's internal
// wrapping: the operation and the lock or key, then what happened:
//
//	release "job1": lease not held (expired, released, or never granted)
//	put "ledger": stale token 1, highest seen 2
//	put "ledger": token of lock "other", but the key is fenced by lock "report"
//	acquire "job1": invalid ttl_ms "0": must be between 1 and 86400000
//	lock "job1" is held (expires in 1.2s)
//
// A lease id is never echoed. The codes:
//
//	400 invalid          bad name, key, TTL, token, lease id, JSON, header or path;
//	                     Fence-Lock missing ({"field":"Fence-Lock"})
//	401 unauthorized     missing or wrong bearer token
//	403 forbidden        the token's scope does not cover the request
//	404 not_found        unknown key or route
//	405 method_not_allowed
//	409 held             lock still held after the wait (expires_in_ms as of its end, when known)
//	409 stale_token      {"highest":N,"token":N}: the key accepted a higher token
//	409 wrong_lock       {"lock":NAME}: the key is fenced by another lock
//	409 unissued_token   {"lock","token","last"[,"other_lease"]}: never issued (P9)
//	409 lease_required   {"key","lock","token"}: a live lease's token without Fence-Lease (P9)
//	409 token_exhausted  the lock's counter is at fence.MaxToken
//	409 limit_mismatch   {"limit":N,"held_limit":M}: the live leases have another limit
//	410 not_held         the lease expired, was released, or is not yours
//	413 too_large        request body over the limit
//	404 not_held         revoke: no unexpired lease holds the lock
//	501 not_implemented  the store has no KV, Guard, Inspector, Healer, Revoker or
//	                     Watcher (a blocking query), or no semaphores or shared locks
//	503 unavailable      the store could not be reached, the server is shutting down,
//	                     or Config.MaxWaiters requests are waiting already
//	500 internal         a bug (the store panicked, say); the log has it
//
// One answer is not the server's own: a request target with a malformed percent
// escape (GET /v1/locks/%zz, a '%' not followed by two hex digits) is refused by
// net/http while it reads the request, before any handler: 400 with the plain-text
// body "400 Bad Request" and the connection closed. A client that escapes names as
// EscapeName does never sends one.
//
// The Client's errors for an answer read exactly as "error" (a *ServerError) and
// match the code's fence sentinel with errors.Is and, where the body has detail, the
// typed fence error with errors.As; a server it cannot reach reads "cannot reach the
// fence server at URL: REASON" and matches fence.ErrUnavailable.
//
// A renew or release with another holder's lease id is answered 410 (not 403): a
// backend cannot tell "not yours" from "gone", and saying which would leak whether
// someone else holds the lock.
//
// # Security
//
// With Config.AuthTokens or Config.Tokens set, every request but /healthz, /readyz, GET / and
// the dashboard's static files (/ui, which hold no secrets; the page asks for the token
// and sends it on its API calls) needs Authorization: Bearer TOKEN, compared in
// constant time; a missing or unknown token is 401. A scoped token (AuthToken,
// ParseAuthTokens) has rights on lock names and keys: read (GET of locks, lists and
// values), lock (acquire, renew, release), write (PUT and DELETE /v1/kv, POST
// /v1/fences) and admin (revoke, heal, purge, /metrics, and everything); a
// request it does not cover is 403 "forbidden", naming what was refused and what
// the token has. A listing's
// prefix must lie within one of the token's prefix patterns. The scope is checked
// on the route the router reads (an action word last makes the path that action's,
// for every method), so a path cannot name one lock to the check and another to the
// handler; a request its route refuses anyway (a method it does not serve, a
// malformed name) is answered as without scopes, 405 or 400. Lease ids
// (128 random bits from the backend) are credentials: the server never logs them,
// and GET /v1/kv never returns them.
package fencehttp
