"""The exceptions of the fence client: one class per error code of the HTTP API."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple, Type

__all__ = [
    "FenceError",
    "InvalidError",
    "TooLargeError",
    "LimitMismatchError",
    "UnauthorizedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "HeldError",
    "StaleTokenError",
    "WrongLockError",
    "UnissuedTokenError",
    "LeaseRequiredError",
    "TokenExhaustedError",
    "NotHeldError",
    "NotSupportedError",
    "UnavailableError",
    "InternalError",
]


def quote(s: str) -> str:
    """Returns s in double quotes, escaped, as the server quotes names in messages."""
    return json.dumps(s, ensure_ascii=False)


def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and v != "" else None


class FenceError(Exception):
    """FenceError is the base of every error of the fence client.

    ``message`` (also ``str(err)``) is the one line a user reads: for an answer of
    the server, its ``"error"`` verbatim (it names the operation and the lock or
    key already, e.g. ``release "job1": lease not held (expired, released, or never
    granted)``); for an error the client makes itself (bad arguments, an
    unreachable server), a line worded the same way. ``code`` is the API's error
    code (``"invalid"``, ``"held"``, ...), ``status`` the HTTP status, or None when
    no answer came (the client refused the call, or the server was not reached).
    ``body`` is the decoded JSON error body ({} if there was none).
    """

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.status: Optional[int] = status
        if code is not None:
            self.code = code
        self.body: Dict[str, Any] = dict(body or {})

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%r, code=%r, status=%r)" % (type(self).__name__, self.message, self.code, self.status)


class InvalidError(FenceError):
    """InvalidError (400 "invalid") is bad input: a name, key, TTL, wait, token,
    lease id, value or header. ``field`` names what was wrong (``"name"``,
    ``"ttl"``, ``"Fence-Lock"``, ...), ``reason`` says why, when known."""

    code = "invalid"

    def __init__(self, message: str, *, field: Optional[str] = None, reason: Optional[str] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.field: Optional[str] = field if field is not None else _str(self.body.get("field"))
        self.reason: Optional[str] = reason if reason is not None else _str(self.body.get("reason"))


class TooLargeError(InvalidError):
    """TooLargeError (413 "too_large") is a request body or KV value over the
    server's limit."""

    code = "too_large"


class LimitMismatchError(InvalidError):
    """LimitMismatchError (409 "limit_mismatch"): the lock's live leases were granted
    with another limit than the acquire asked for; every acquirer of a semaphore must
    use the same limit (a lock and a shared lock count as 1). Nothing changed; the
    same acquire succeeds once the live leases end. ``limit`` is the limit asked for,
    ``held_limit`` the live leases', ``name`` the lock."""

    code = "limit_mismatch"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.limit: Optional[int] = _int(self.body.get("limit"))
        self.held_limit: Optional[int] = _int(self.body.get("held_limit"))
        self.name: Optional[str] = _str(self.body.get("name"))


class UnauthorizedError(FenceError):
    """UnauthorizedError (401 "unauthorized"): the server refused the bearer token
    (missing or wrong; see FENCE_AUTH_TOKEN)."""

    code = "unauthorized"


class NotFoundError(FenceError):
    """NotFoundError (404 "not_found"): the key holds no value (never written; for
    Client.delete, already deleted too; for Client.purge, neither a value nor a
    fence), or no such route."""

    code = "not_found"


class MethodNotAllowedError(FenceError):
    """MethodNotAllowedError (405 "method_not_allowed")."""

    code = "method_not_allowed"


class HeldError(FenceError):
    """HeldError (409 "held"): the lock was still held when the wait ended.
    ``expires_in_ms`` is the time the holder's lease had left then (None if
    unknown); ``name`` is the lock."""

    code = "held"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.expires_in_ms: Optional[int] = _int(self.body.get("expires_in_ms"))
        self.name: Optional[str] = _str(self.body.get("name"))


class StaleTokenError(FenceError):
    """StaleTokenError (409 "stale_token"): a fenced write was refused and changed
    nothing, because the key has accepted a higher token (``highest``) than this
    write's (``token``), or the same token under another lease (``same_token``).
    ``key`` is the key written."""

    code = "stale_token"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.highest: Optional[int] = _int(self.body.get("highest"))
        self.token: Optional[int] = _int(self.body.get("token"))
        self.key: Optional[str] = _str(self.body.get("key"))
        self.same_token: bool = self.body.get("same_token") is True


class WrongLockError(FenceError):
    """WrongLockError (409 "wrong_lock"): the key is fenced by another lock
    (``lock``) than the one the write named (``got``); the write changed nothing."""

    code = "wrong_lock"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.lock: Optional[str] = _str(self.body.get("lock"))
        self.got: Optional[str] = _str(self.body.get("got"))
        self.key: Optional[str] = _str(self.body.get("key"))


class UnissuedTokenError(FenceError):
    """UnissuedTokenError (409 "unissued_token"): the server never issued this fence,
    and the write changed nothing: the token (``token``) is above the last one it
    issued for the lock (``last``; 0 if it never granted ``lock``), or, with
    ``other_lease``, it issued the token to another lease than the one sent. Fence
    only with the token (and lease) of a real grant. ``key`` is the key written, when
    the server names it."""

    code = "unissued_token"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.lock: Optional[str] = _str(self.body.get("lock"))
        self.token: Optional[int] = _int(self.body.get("token"))
        self.last: Optional[int] = _int(self.body.get("last"))
        self.other_lease: bool = self.body.get("other_lease") is True
        self.key: Optional[str] = _str(self.body.get("key"))


class LeaseRequiredError(FenceError):
    """LeaseRequiredError (409 "lease_required"): the token (``token``) of lock
    ``lock`` belongs to a live lease and the write came without its lease id; it
    changed nothing. The token is public (a lock's state shows it): stored without a
    lease, the fence would refuse the holder's own writes under that token. Write
    with the Lease (or its lock, token and lease id). Once the lease has ended, the
    token alone is admitted as any token is. ``key`` is the key written, when the
    server names it."""

    code = "lease_required"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.lock: Optional[str] = _str(self.body.get("lock"))
        self.token: Optional[int] = _int(self.body.get("token"))
        self.key: Optional[str] = _str(self.body.get("key"))


class TokenExhaustedError(FenceError):
    """TokenExhaustedError (409 "token_exhausted"): the lock's token counter is at
    its maximum; it grants no more leases."""

    code = "token_exhausted"


class NotHeldError(FenceError):
    """NotHeldError (410 "not_held"): the lease expired, was released, was revoked,
    or is not yours; also raised by the client for a lease it already knows is over,
    and by Client.revoke when no unexpired lease holds the lock (404 "not_held")."""

    code = "not_held"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.name: Optional[str] = _str(self.body.get("name"))


class NotSupportedError(FenceError):
    """NotSupportedError (501 "not_implemented"): the server's store lacks the
    feature (no KV store, no healing, no semaphores or shared locks, ...)."""

    code = "not_implemented"


class UnavailableError(FenceError):
    """UnavailableError (503 "unavailable", 502, 504, or no answer at all): the
    server's store could not be reached, the server is shutting down, or the server
    itself could not be reached: ``cannot reach the fence server at URL: REASON``.
    A write that failed so may or may not have happened; retrying is safe."""

    code = "unavailable"


class InternalError(FenceError):
    """InternalError (500 "internal"): the server failed; its log says why."""

    code = "internal"


_CLASSES: Tuple[Type[FenceError], ...] = (
    InvalidError,
    TooLargeError,
    LimitMismatchError,
    UnauthorizedError,
    NotFoundError,
    MethodNotAllowedError,
    HeldError,
    StaleTokenError,
    WrongLockError,
    UnissuedTokenError,
    LeaseRequiredError,
    TokenExhaustedError,
    NotHeldError,
    NotSupportedError,
    UnavailableError,
    InternalError,
)
_BY_CODE: Dict[str, Type[FenceError]] = {c.code: c for c in _CLASSES}

_BY_STATUS: Dict[int, Type[FenceError]] = {
    400: InvalidError,
    401: UnauthorizedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    410: NotHeldError,
    413: TooLargeError,
    500: InternalError,
    501: NotSupportedError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
}


def error_from_answer(status: int, body: Dict[str, Any]) -> FenceError:
    """Returns the exception of a JSON error answer of the server: the class of its
    code, its message the body's "error" verbatim."""
    code = body.get("code")
    message = body.get("error")
    if not isinstance(code, str):
        code = ""
    if not isinstance(message, str) or message == "":
        message = "server answered %d %s" % (status, code)
    cls = _BY_CODE.get(code, _BY_STATUS.get(status, FenceError))
    return cls(message, status=status, code=code or cls.code, body=body)


def error_for_status(status: int, message: str) -> FenceError:
    """Returns the exception of an answer that is not fence's JSON (a proxy's page),
    by its status alone."""
    cls = _BY_STATUS.get(status, FenceError)
    return cls(message, status=status)
