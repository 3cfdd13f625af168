"""The client of `fence serve` (HTTP API v1): Client, Lease, Item and lock()."""

from __future__ import annotations

import errno
import http.client
import ipaddress
import json
import math
import os
import secrets
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Generator, List, Mapping, Optional, Tuple, Type, Union

from ._errors import (
    FenceError,
    HeldError,
    InvalidError,
    NotHeldError,
    NotSupportedError,
    UnavailableError,
    error_for_status,
    error_from_answer,
    quote,
)

__all__ = ["Client", "Lease", "Item", "Leader", "LockContext", "lock", "default_client", "FOREVER", "DEFAULT_SERVER"]

DEFAULT_SERVER = "http://127.0.0.1:7420"
"""DEFAULT_SERVER is the server a Client talks to when neither its argument nor
FENCE_SERVER names one."""

FOREVER = math.inf
"""FOREVER, as the wait of acquire or lock, waits until the lock is granted."""

MAX_TOKEN = (1 << 53) - 1
MAX_NAME_BYTES = 255
MAX_LEASE_ID_BYTES = 128
MAX_OWNER_BYTES = 256
MAX_REQUEST_ID_BYTES = 128
MAX_LIMIT = 1024
MIN_TTL = 0.001
MAX_TTL = 86400.0

HEADER_TOKEN = "Fence-Token"
HEADER_LOCK = "Fence-Lock"
HEADER_LEASE = "Fence-Lease"
HEADER_INDEX = "Fence-Index"
# The attempt id of a write (put, delete): one per logical write, the same on every
# retry, so that the store applies the first attempt to land and a late one writes
# nothing (P3).
HEADER_ATTEMPT = "Fence-Attempt"
MAX_ATTEMPT_ID_BYTES = 64

_MAX_RESPONSE_BYTES = 64 << 20
_MIN_BACKOFF = 0.05
_MAX_BACKOFF = 1.0
_ABANDON_TIMEOUT = 1.0  # seconds: the abandon of a given-up acquire is best effort
_STOP_POLL = 0.05  # how often a watch's helper thread looks at its stop event

Value = Union[bytes, bytearray, memoryview, str]


# --- validation, worded as the server words it -------------------------------------


def _op_name(op: str, name: str) -> str:
    return "%s %s" % (op, quote(name)) if name else op


def _invalid(op: str, name: str, field: str, value: Optional[str], reason: str) -> InvalidError:
    if value is None or value == "":
        fact = "invalid %s: %s" % (field, reason)
    else:
        if len(value) > 64:
            value = value[:64] + "..."
        fact = "invalid %s %s: %s" % (field, quote(value), reason)
    return InvalidError("%s: %s" % (_op_name(op, name), fact), field=field, reason=reason)


def _check_name(op: str, name: Any, field: str = "name", subject: str = "") -> str:
    """Returns name if it is a valid lock name (or key, with field "key"): 1 to 255
    bytes of UTF-8 without control characters. Raises InvalidError otherwise. The
    message names op and subject (the lock or key concerned), not the bad name
    itself, which the fact quotes."""
    if not isinstance(name, str):
        raise _invalid(op, subject, field, None, "must be a string, got %s" % type(name).__name__)
    if name == "":
        raise _invalid(op, subject, field, None, "is empty")
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise _invalid(op, subject, field, None, "is not valid UTF-8") from None
    if n > MAX_NAME_BYTES:
        raise _invalid(op, subject, field, name, "is %d bytes, longer than %d" % (n, MAX_NAME_BYTES))
    for ch in name:
        if _is_control(ch):
            raise _invalid(op, subject, field, None, "contains control character U+%04X" % ord(ch))
    return name


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return o < 0x20 or 0x7F <= o < 0xA0


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _valid_lease_id(v: str) -> bool:
    return 0 < len(v) <= MAX_LEASE_ID_BYTES and all("!" <= c <= "~" for c in v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_ttl(op: str, name: str, ttl: Any) -> int:
    """Returns ttl (seconds) as whole milliseconds, or raises InvalidError."""
    if not _is_number(ttl):
        raise _invalid(op, name, "ttl", None, "must be a number of seconds, got %s" % type(ttl).__name__)
    if not (MIN_TTL <= ttl <= MAX_TTL):  # NaN fails too
        raise _invalid(op, name, "ttl", repr(ttl), "must be between %g and %g seconds" % (MIN_TTL, MAX_TTL))
    ms = round(ttl * 1000)
    if abs(ms - ttl * 1000) > 1e-6:
        raise _invalid(op, name, "ttl", repr(ttl), "must be a whole number of milliseconds")
    return int(ms)


def _check_wait(op: str, name: str, wait: Any) -> float:
    """Returns wait in seconds (0 for None, math.inf for FOREVER), or raises InvalidError."""
    if wait is None:
        return 0.0
    if not _is_number(wait):
        raise _invalid(op, name, "wait", None, "must be a number of seconds or FOREVER, got %s" % type(wait).__name__)
    if math.isnan(wait) or wait < 0:
        raise _invalid(op, name, "wait", repr(wait), "must not be negative")
    return float(wait)


def _check_query_wait(op: str, name: str, wait: Any, default: float) -> int:
    """Returns the wait of a blocking query (seconds; None: default) in whole
    milliseconds, at least 1 and at most default's, or raises InvalidError. 0 is
    refused: a watch asking the server not to wait would poll it in a busy loop."""
    if wait is None:
        wait = default
    if not _is_number(wait):
        raise _invalid(op, name, "wait", None, "must be a number of seconds, got %s" % type(wait).__name__)
    if not (0 < wait < math.inf):  # NaN fails too
        raise _invalid(op, name, "wait", repr(wait), "must be a positive number of seconds")
    seconds: float = min(wait, default)
    return max(1, math.ceil(seconds * 1000))


def _check_token(op: str, name: str, token: Any, field: str = "token") -> int:
    if not isinstance(token, int) or isinstance(token, bool):
        raise _invalid(op, name, field, None, "must be an integer, got %s" % type(token).__name__)
    if token < 1:
        raise _invalid(op, name, field, str(token), "must be at least 1")
    if token > MAX_TOKEN:
        raise _invalid(op, name, field, str(token), "is above the maximum %d" % MAX_TOKEN)
    return token


def _check_lease_id(op: str, name: str, lease_id: Any, field: str = "lease") -> str:
    # A lease id is a credential: never put it in a message.
    if not isinstance(lease_id, str):
        raise _invalid(op, name, field, None, "must be a string, got %s" % type(lease_id).__name__)
    if lease_id == "":
        raise _invalid(op, name, field, None, "is empty")
    if len(lease_id) > MAX_LEASE_ID_BYTES:
        raise _invalid(op, name, field, None, "is %d bytes, longer than %d" % (len(lease_id), MAX_LEASE_ID_BYTES))
    if not _valid_lease_id(lease_id):
        raise _invalid(op, name, field, None, "must be printable ASCII without spaces")
    return lease_id


def _check_owner(op: str, name: str, owner: Any) -> str:
    """Returns owner ("" for None: no owner) if it is a string of at most 256 bytes of
    UTF-8, or raises InvalidError. Which characters are printable is the server's to
    say: it answers 400 naming the field "owner"."""
    if owner is None:
        return ""
    if not isinstance(owner, str):
        raise _invalid(op, name, "owner", None, "must be a string, got %s" % type(owner).__name__)
    try:
        n = len(owner.encode("utf-8"))
    except UnicodeEncodeError:
        raise _invalid(op, name, "owner", None, "is not valid UTF-8") from None
    if n > MAX_OWNER_BYTES:
        raise _invalid(op, name, "owner", owner, "is %d bytes, longer than %d" % (n, MAX_OWNER_BYTES))
    return owner


def _check_request_id(op: str, name: str, request_id: Any) -> str:
    """Returns a request id: 1 to 128 bytes of printable ASCII without spaces."""
    if not isinstance(request_id, str):
        raise _invalid(op, name, "request_id", None, "must be a string, got %s" % type(request_id).__name__)
    if request_id == "":
        raise _invalid(op, name, "request_id", None, "is empty")
    if len(request_id) > MAX_REQUEST_ID_BYTES:
        raise _invalid(
            op, name, "request_id", request_id, "is %d bytes, longer than %d" % (len(request_id), MAX_REQUEST_ID_BYTES)
        )
    if any(not ("!" <= c <= "~") for c in request_id):
        raise _invalid(op, name, "request_id", request_id, "must be printable ASCII without spaces")
    return request_id


def _attempt_id(op: str, key: str, attempt: Any) -> str:
    """Returns a write's attempt id: ``attempt`` (1 to 64 bytes of printable ASCII
    without spaces), or 128 random bits when it is None."""
    if attempt is None:
        return secrets.token_hex(16)
    if not isinstance(attempt, str):
        raise _invalid(op, key, "attempt", None, "must be a string, got %s" % type(attempt).__name__)
    if attempt == "":
        raise _invalid(op, key, "attempt", None, "is empty")
    if len(attempt) > MAX_ATTEMPT_ID_BYTES:
        raise _invalid(op, key, "attempt", attempt, "is %d bytes, longer than %d" % (len(attempt), MAX_ATTEMPT_ID_BYTES))
    if any(not ("!" <= c <= "~") for c in attempt):
        raise _invalid(op, key, "attempt", attempt, "must be printable ASCII without spaces")
    return attempt


def _check_kind(op: str, name: str, limit: Any, shared: Any) -> Dict[str, Any]:
    """Returns the acquire body's fields of the kind of grant: {"limit": N} for a
    semaphore of N > 1, {"shared": True} for a shared lease, {} for a lock (sent as
    before, so older servers take it). Raises InvalidError for a limit that is not
    an integer 1 to 1024, a shared that is not a bool, or both."""
    if limit is None:
        limit = 1
    if not _is_int(limit) or not 1 <= limit <= MAX_LIMIT:
        raise _invalid(op, name, "limit", str(limit), "must be an integer between 1 and %d" % MAX_LIMIT)
    if not isinstance(shared, bool):
        raise _invalid(op, name, "shared", str(shared), "must be a bool")
    if shared and limit > 1:
        raise _invalid(
            op, name, "shared", "true", "cannot be combined with limit %d: a semaphore's permits are not shared" % limit
        )
    if limit > 1:
        return {"limit": limit}
    if shared:
        return {"shared": True}
    return {}


def escape_name(name: str) -> str:
    """Returns name escaped as one URL path segment, '.' included, so that "." and
    ".." are not dot segments and '/' travels as %2F (the server unescapes it back)."""
    return urllib.parse.quote(name, safe="").replace(".", "%2E")


def _escape_header(name: str) -> str:
    """Returns a lock name escaped for the Fence-Lock header (a path segment's escaping;
    plain names are unchanged by it)."""
    return urllib.parse.quote(name, safe="")


# --- the server URL -----------------------------------------------------------------


def _server_urls(server: Optional[str], servers: Optional[List[str]] = None) -> List[str]:
    """Returns the normalised base URLs: those of server (a comma-separated list),
    else of $FENCE_SERVER, else the default; then those of servers."""
    given, source = server, "server"
    if (given is None or given == "") and servers:
        return [_server_url(s, "servers") for s in servers]
    if given is None or given == "":
        given, source = os.environ.get("FENCE_SERVER", ""), "FENCE_SERVER"
    if given == "":
        return [DEFAULT_SERVER] + [_server_url(s, "servers") for s in servers or []]
    if not isinstance(given, str):
        raise InvalidError(
            "invalid server: must be a string, got %s" % type(given).__name__, field="server", reason="must be a string"
        )
    return [_server_url(one.strip(), source) for one in given.split(",")] + [
        _server_url(s, "servers") for s in servers or []
    ]


def _server_url(given: Any, source: str) -> str:
    """Returns the normalised base URL of one server. A bare HOST:PORT means
    http://HOST:PORT."""
    if not isinstance(given, str):
        raise InvalidError(
            "invalid server: must be a string, got %s" % type(given).__name__, field="server", reason="must be a string"
        )
    full = given if "://" in given else "http://" + given
    bad = InvalidError(
        "invalid %s %s: want http://HOST:PORT, https://HOST:PORT or HOST:PORT" % (source, quote(given)),
        field="server",
        reason="want http://HOST:PORT, https://HOST:PORT or HOST:PORT",
    )
    try:
        u = urllib.parse.urlsplit(full)
        u.port  # raises ValueError for a bad port
    except ValueError:
        raise bad from None
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or "@" in u.netloc:
        raise bad
    if given == "" or any(c.isspace() for c in full):
        raise bad
    return full.rstrip("/")


def _not_sent(exc: BaseException) -> bool:
    """Reports whether a request failed to connect, so nothing of it was applied."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    return isinstance(exc, (ConnectionRefusedError, socket.gaierror)) or (
        isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the server sends none, and one from elsewhere (a proxy
    cleaning a path) could point a request at another lock."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def _reach_reason(exc: BaseException) -> str:
    """Says in a few words why a request got no answer."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    elif isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return "EOF"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "connection reset"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return "no such host"
        return "DNS lookup failed: %s" % (exc.strerror or exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "TLS: %s" % (exc.verify_message or exc.reason or exc)
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to host"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _all_dicts(items: List[Any]) -> bool:
    """Reports whether every item is a dict with a string "name"."""
    return all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


# --- Item ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """Item is a key of the fenced KV store: its ``value``, and its fence: ``lock``, the
    lock whose counter fences the key, and ``token``, the highest token the key has
    accepted (the last write's, or a later Client.fence's or Client.delete's). The
    value is None when the key is fenced but holds none (it was only fenced, or its
    value was deleted). The lease id is never disclosed."""

    value: Optional[bytes]
    token: int
    lock: str

    @property
    def text(self) -> str:
        """The value decoded as UTF-8, "" when there is none (raises
        UnicodeDecodeError if it is not UTF-8)."""
        return "" if self.value is None else self.value.decode("utf-8")


@dataclass(frozen=True)
class Leader:
    """Leader is the leader of an election (the holder of its lock, as ``fence
    elect`` and ``fence leader`` use it), as Client.leader and Client.observe_leader
    report it: ``leading`` is False, ``owner`` "" and ``epoch`` and ``expires_in_ms``
    0 when nobody leads. ``epoch`` is the term's fencing token, greater for every
    later term; ``expires_in_ms`` what the leader's lease had left as of the read."""

    name: str
    leading: bool
    owner: str
    epoch: int
    expires_in_ms: int


def _leader_of(state: Mapping[str, Any]) -> Leader:
    name = str(state.get("name", ""))
    token: Any = state.get("token")
    owner: Any = state.get("owner")
    left: Any = state.get("expires_in_ms")
    if state.get("held") is not True or not _is_int(token) or token < 1:
        return Leader(name=name, leading=False, owner="", epoch=0, expires_in_ms=0)
    return Leader(
        name=name,
        leading=True,
        owner=owner if isinstance(owner, str) else "",
        epoch=token,
        expires_in_ms=left if _is_int(left) else 0,
    )


def _leader_changes(states: Generator[Dict[str, Any], None, None]) -> Generator[Leader, None, None]:
    """Yields the leader of the first state, then of each state whose epoch differs
    from the last one yielded; closing it closes states."""
    try:
        last: Optional[int] = None
        for state in states:
            ld = _leader_of(state)
            if ld.epoch == last:
                continue  # the same term: a change of the lock that is no change of leader
            last = ld.epoch
            yield ld
    finally:
        states.close()


# --- ending a watch from another thread ----------------------------------------------


def _dup_socket(sock: socket.socket) -> Optional[socket.socket]:
    try:
        return socket.fromfd(sock.fileno(), sock.family, sock.type)
    except OSError:
        return None


class _Aborter:
    """_Aborter lets another thread end the request in flight of a watch (see
    Client.watch's stop). The watch's connections hand it their socket as they
    connect; it keeps a duplicate of the socket's descriptor, its own to close, so
    that abort() can shut the connection down (a read blocked on it then returns at
    once) without ever touching a descriptor the request closed and the process
    reused meanwhile."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._dup: Optional[socket.socket] = None
        self.aborted = False

    def track(self, sock: Optional[socket.socket]) -> None:
        """Follows sock, a connection's socket, until the next done()."""
        if sock is None:
            return
        with self._mu:
            self._close_locked()
            self._dup = _dup_socket(sock)
            if self.aborted:
                self._shutdown_locked()

    def done(self) -> None:
        """Forgets the socket of the request that just ended."""
        with self._mu:
            self._close_locked()

    def abort(self) -> None:
        """Ends the request in flight, and every later one, at once."""
        with self._mu:
            self.aborted = True
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        if self._dup is not None:
            try:
                self._dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the connection is gone already

    def _close_locked(self) -> None:
        if self._dup is not None:
            self._dup.close()
            self._dup = None


class _AbortableMixin:
    """Makes a urllib HTTP(S) handler hand the socket of each connection it opens to
    an _Aborter, whatever connection class and arguments the handler uses."""

    _aborter: _Aborter

    def do_open(self, http_class: Any, req: Any, **kw: Any) -> Any:
        aborter = self._aborter

        def connection(host: str, **args: Any) -> http.client.HTTPConnection:
            conn: http.client.HTTPConnection = http_class(host, **args)
            connect = conn.connect

            def tracked_connect() -> None:
                connect()
                aborter.track(conn.sock)

            setattr(conn, "connect", tracked_connect)  # per connection: the class is urllib's choice
            return conn

        return super().do_open(connection, req, **kw)  # type: ignore[misc]


class _AbortableHTTPHandler(_AbortableMixin, urllib.request.HTTPHandler):
    def __init__(self, aborter: _Aborter) -> None:
        super().__init__()
        self._aborter = aborter


class _AbortableHTTPSHandler(_AbortableMixin, urllib.request.HTTPSHandler):
    def __init__(self, aborter: _Aborter, context: Optional[ssl.SSLContext]) -> None:
        super().__init__(context=context)
        self._aborter = aborter


def _abort_on_stop(stop: threading.Event, aborter: _Aborter, ended: threading.Event) -> None:
    """Aborts the watch of aborter once stop is set; returns when the watch ended."""
    while not ended.is_set():
        if stop.wait(_STOP_POLL):
            aborter.abort()
            return


# --- Client -------------------------------------------------------------------------


class Client:
    """Client talks to a `fence serve` server (HTTP API v1). It is safe to use from
    several threads.

    ``server`` is the server's URL: ``http://HOST:PORT``, ``https://HOST:PORT`` or a
    bare ``HOST:PORT`` (http), or a comma-separated list of the servers of one
    cluster; ``servers`` adds more; None means $FENCE_SERVER (which may be such a
    list), else ``http://127.0.0.1:7420``. ``token`` is the bearer token sent with
    every request; None means $FENCE_AUTH_TOKEN (none if unset). ``timeout`` bounds
    one request in seconds, all its attempts together, beyond the long poll of a
    waiting acquire. ``attempt_timeout`` bounds one attempt on one server (then the
    request moves to the next); None means ``timeout`` with one server, and 5
    seconds (or ``timeout`` if shorter) with several. ``max_poll`` is the longest
    wait asked of the server in one long poll (the server caps it too, at its
    --max-wait); a longer wait is several polls. ``ssl_context`` verifies an https
    server (e.g. ``ssl.create_default_context(cafile=...)`` for a private CA).

    Raises InvalidError for a bad server URL or option.

    Every method raises a FenceError subclass: the one of the server's error code for
    an answer (its message the server's "error" verbatim), UnavailableError
    (``cannot reach the fence server at URL: REASON``) when there is no answer, and
    InvalidError for arguments refused before any request.

    Several servers: each request goes to the server that last answered
    (``server``), and moves to the next one, each server once per request, when it
    cannot connect or fails without an answer, passes ``attempt_timeout``, or is
    answered 502, 503 or 504 (503: a node cut off from the majority, a server
    shutting down); long polls move too. When no server answers, the error names
    each one tried (``cannot reach the fence server at URL1: REASON; at URL2:
    REASON``), or is the last 503. Retrying is safe: every acquire carries a request
    id (``request_id``: the caller's, or 128 random bits), the same on every attempt
    and poll, so a store that keeps request ids (the embedded store, etcd, cluster mode) answers a retry
    with the grant whose answer was lost, never a second one; a renewal twice is
    one; a release whose earlier attempt may have been applied and whose retry is
    answered 410 returns (the lease is over either way, and a release never
    touches another lease).
    """

    def __init__(
        self,
        server: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        max_poll: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        servers: Optional[List[str]] = None,
        attempt_timeout: Optional[float] = None,
    ) -> None:
        self.servers: Tuple[str, ...] = tuple(_server_urls(server, servers))
        """The normalised base URLs of the servers, in the order they are tried."""
        self._cur = 0  # index in servers of the server that last answered
        if token is None:
            token = os.environ.get("FENCE_AUTH_TOKEN") or None
        if token is not None and (not isinstance(token, str) or token.strip() == "" or any(c in token for c in "\r\n")):
            raise InvalidError("invalid auth token: must be a non-empty string on one line", field="token")
        self._auth = token.strip() if token else None
        for field, v in (("timeout", timeout), ("max_poll", max_poll)):
            if not _is_number(v) or not (0 < v < math.inf):
                raise InvalidError("invalid %s %r: must be a positive number of seconds" % (field, v), field=field)
        self.timeout: float = float(timeout)
        self.max_poll: float = float(max_poll)
        if attempt_timeout is None:
            attempt_timeout = self.timeout if len(self.servers) == 1 else min(5.0, self.timeout)
        if not _is_number(attempt_timeout) or not (0 < attempt_timeout < math.inf):
            raise InvalidError(
                "invalid attempt_timeout %r: must be a positive number of seconds" % (attempt_timeout,),
                field="attempt_timeout",
            )
        self.attempt_timeout: float = float(attempt_timeout)
        self._direct = all(_is_loopback(urllib.parse.urlsplit(s).hostname or "") for s in self.servers)
        self._ssl_context = ssl_context
        self._opener = self._new_opener()

    def _new_opener(self, aborter: Optional[_Aborter] = None) -> urllib.request.OpenerDirector:
        """Returns an opener of this client's requests; with aborter, one whose
        connections aborter can shut down from another thread."""
        handlers: List[urllib.request.BaseHandler] = [_NoRedirect()]
        if self._direct:
            handlers.append(urllib.request.ProxyHandler({}))  # never send loopback through a proxy
        if aborter is not None:
            handlers.append(_AbortableHTTPHandler(aborter))
            handlers.append(_AbortableHTTPSHandler(aborter, self._ssl_context))
        elif self._ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._ssl_context))
        return urllib.request.build_opener(*handlers)

    @property
    def server(self) -> str:
        """The base URL of the server that last answered (the first, before any
        answer), without a trailing slash."""
        return self.servers[self._cur]

    def __repr__(self) -> str:
        return "fence.Client(%r)" % ",".join(self.servers)

    # --- transport ---

    def _request(
        self,
        op: str,
        name: str,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        opener: Optional[urllib.request.OpenerDirector] = None,
        fenced_404: bool = False,
        gone_ok: bool = False,
    ) -> Tuple[int, http.client.HTTPMessage, bytes]:
        """Sends one request (with opener, else the client's), failing over between
        the servers, and returns (status, headers, body) of a 200 answer, and with
        fenced_404 of a 404 that carries a key's fence (Fence-Token and Fence-Lock),
        and with gone_ok of a 410 after an attempt that may have been applied (a
        release's retry). Raises the FenceError of any other answer,
        UnavailableError without one. timeout, if given, is the client's timeout
        plus the long poll asked of the server."""
        h = dict(headers or {})
        if self._auth:
            h["Authorization"] = "Bearer " + self._auth
        if body is None and method in ("POST", "PUT"):
            body = b""
        extra = 0.0 if timeout is None else max(timeout - self.timeout, 0.0)
        end = time.monotonic() + self.timeout + extra
        n = len(self.servers)
        first = self._cur
        fails: List[str] = []
        last_exc: Optional[BaseException] = None
        last_answer: Optional[FenceError] = None
        uncertain = False
        for i in range(n):
            k = (first + i) % n
            server = self.servers[k]
            req = urllib.request.Request(server + path, data=body, headers=h, method=method)
            t = max(min(self.attempt_timeout + extra, end - time.monotonic()), 0.001)
            try:
                with (opener or self._opener).open(req, timeout=t) as resp:
                    data = resp.read(_MAX_RESPONSE_BYTES)
                    self._cur = k
                    return resp.status, resp.headers, data
            except urllib.error.HTTPError as e:
                try:
                    data = e.read(_MAX_RESPONSE_BYTES)
                except (OSError, http.client.HTTPException):
                    data = b""
                finally:
                    e.close()
                if n > 1 and e.code in (502, 503, 504):
                    uncertain = True
                    last_answer = self._answer_error(e.code, data, server)
                    fails.append("at %s: %d %s" % (server, e.code, http.client.responses.get(e.code, "")))
                else:
                    self._cur = k
                    if fenced_404 and e.code == 404 and e.headers.get(HEADER_TOKEN) and e.headers.get(HEADER_LOCK):
                        return e.code, e.headers, b""
                    if gone_ok and uncertain and e.code == 410:
                        return e.code, e.headers, b"{}"
                    raise self._answer_error(e.code, data, server) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                last_exc = e
                uncertain = uncertain or not _not_sent(e)
                fails.append("at %s: %s" % (server, _reach_reason(e)))
            if time.monotonic() >= end:
                break  # the request's timeout is over: no time for another server
        if last_answer is not None:
            raise last_answer
        raise UnavailableError("cannot reach the fence server " + "; ".join(fails)) from last_exc

    def _answer_error(self, status: int, data: bytes, server: Optional[str] = None) -> FenceError:
        server = server or self.server
        body: Any = None
        try:
            body = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            pass
        if isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"]:
            return error_from_answer(status, body)
        reason = "%d %s" % (status, http.client.responses.get(status, ""))
        reason = reason.strip()
        if status in (502, 503, 504):
            return error_for_status(status, "cannot reach the fence server at %s: %s" % (server, reason))
        text = " ".join(data.decode("utf-8", "replace").split())
        if len(text) > 200:
            text = text[:200] + "..."
        if text:
            reason += ": " + text
        return error_for_status(status, "unexpected answer from %s (not a fence server?): %s" % (server, reason))

    def _post_json(
        self,
        op: str,
        name: str,
        path: str,
        payload: Dict[str, Any],
        timeout: Optional[float] = None,
        gone_ok: bool = False,
    ) -> Dict[str, Any]:
        data = json.dumps(payload).encode("utf-8")
        _, _, raw = self._request(
            op,
            name,
            "POST",
            path,
            body=data,
            headers={"Content-Type": "application/json"},
            timeout=timeout,
            gone_ok=gone_ok,
        )
        return self._object(op, name, raw)

    def _object(self, op: str, name: str, raw: bytes) -> Dict[str, Any]:
        """Returns the JSON object of a 200 answer, or raises the error of a malformed one."""
        try:
            out = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            out = None
        if not isinstance(out, dict):
            raise self._malformed(op, name)
        return out

    def _malformed(self, op: str, name: str) -> UnavailableError:
        return UnavailableError("%s: malformed answer from the fence server at %s" % (_op_name(op, name), self.server))

    # --- locks ---

    def acquire(
        self,
        name: str,
        ttl: float = 30,
        wait: Optional[float] = None,
        *,
        auto_renew: bool = False,
        owner: Optional[str] = None,
        limit: Optional[int] = None,
        shared: bool = False,
        request_id: Optional[str] = None,
    ) -> Lease:
        """Acquires the lock ``name`` for ``ttl`` seconds and returns its Lease.

        ``wait`` is how long to wait for a held lock, in seconds: None or 0 tries
        once, FOREVER waits until granted. The wait is a long poll woken by the
        holder's release; one poll is capped (by max_poll and the server), so a
        longer wait polls again until it is over. While the wait lasts, an
        unreachable or restarting server is retried with backoff (50ms to 1s).

        The lease's local deadline counts from when the granting request was sent,
        plus the time the server says it held the request before the store started
        the grant (waited_ms), never later than now: it is never later than the
        server's expiry. With ``auto_renew`` the lease renews itself (see lock()).

        ``owner`` names the holder (``"HOST:PID COMMAND"``, a job id: at most 256
        bytes of printable UTF-8); status() reports it while the lease is held. It is
        a label for people, not a credential, and is sent only when set (None or ""
        names none).

        ``limit`` (2 to 1024) takes a permit of a semaphore of ``limit`` permits: at
        most that many leases on the name at once, each with a ``slot`` in [0, limit)
        and a token from the name's one counter, so a resource per slot (partition
        3) is fenced as a lock's resource is. Every acquirer of a name must use the
        same limit while leases are live. None or 1 is a lock. ``shared`` takes a
        shared lease: any number of shared holders, or one exclusive holder (an
        acquire without it); while an exclusive acquire waits, new shared acquires
        find the lock held, so readers cannot starve a writer. Each is sent only when
        set.

        ``request_id`` names this acquire across its retries (1 to 128 bytes of
        printable ASCII without spaces; None: 128 random bits). Every attempt and
        poll of the call sends it, so that where the server's store keeps request
        ids (the embedded store, etcd, cluster mode) a retry whose first answer was lost (a timeout, a
        failover to another node) gets that grant, not a second one. Whoever knows a
        live grant's request id gets its lease: keep it secret.

        Raises HeldError (with expires_in_ms) if the lock is still held when the wait
        is over (for a semaphore: all its permits), LimitMismatchError (an
        InvalidError) if the name's live leases have another limit, InvalidError for a
        bad name, ttl, wait, owner or limit or for shared with a limit above 1,
        NotSupportedError if the server's store has no semaphores or shared locks,
        UnavailableError if the server cannot be reached (it may then have granted a
        lease nobody learns of; it expires after ttl), UnauthorizedError,
        TokenExhaustedError. Before it raises UnavailableError (or lets a
        KeyboardInterrupt through) it sends a best-effort abandon (a release by
        request id), so that a grant made for it after all is released at once.
        """
        op = "acquire"
        name = _check_name(op, name)
        ttl_ms = _check_ttl(op, name, ttl)
        wait_s = _check_wait(op, name, wait)
        owner = _check_owner(op, name, owner)
        kind = _check_kind(op, name, limit, shared)
        rid = secrets.token_hex(16) if request_id is None else _check_request_id(op, name, request_id)
        path = "/v1/locks/%s/acquire" % escape_name(name)
        try:
            return self._acquire_polls(op, name, path, ttl_ms, wait_s, owner, kind, rid, auto_renew)
        except (UnavailableError, KeyboardInterrupt):
            # Given up with an attempt's outcome unknown: abandon the acquire, so
            # that a grant made for it after all frees the lock at once instead of
            # at its expiry.
            self._abandon(name, rid, ttl_ms, kind)
            raise

    def _abandon(self, name: str, rid: str, ttl_ms: int, kind: Dict[str, Any]) -> None:
        """Sends, best effort, the abandon of the acquire of ``name`` under request
        id ``rid``: a release by request id, which ends that acquire's grant if it
        was granted after all. Its errors are dropped: what it cannot free expires."""
        payload: Dict[str, Any] = {"request_id": rid, "ttl_ms": ttl_ms}
        payload.update(kind)
        body = json.dumps(payload).encode("utf-8")
        h = {"Content-Type": "application/json"}
        if self._auth:
            h["Authorization"] = "Bearer " + self._auth
        end = time.monotonic() + _ABANDON_TIMEOUT
        n = len(self.servers)
        for i in range(n):
            left = end - time.monotonic()
            if left <= 0:
                return
            server = self.servers[(self._cur + i) % n]
            req = urllib.request.Request(server + "/v1/locks/%s/release" % escape_name(name), data=body, headers=h, method="POST")
            try:
                with self._opener.open(req, timeout=left) as resp:
                    resp.read(_MAX_RESPONSE_BYTES)
                return
            except urllib.error.HTTPError as e:
                e.close()
                if e.code not in (502, 503, 504):
                    return  # answered: released, or nothing to release
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
                pass

    def _acquire_polls(
        self,
        op: str,
        name: str,
        path: str,
        ttl_ms: int,
        wait_s: float,
        owner: str,
        kind: Dict[str, Any],
        rid: str,
        auto_renew: bool,
    ) -> Lease:
        """The polls of acquire, with its checked arguments."""
        forever = math.isinf(wait_s)
        wait_end = time.monotonic() + (0.0 if forever else wait_s)
        backoff = _MIN_BACKOFF
        # Each pass is one poll; the wait's end bounds them (FOREVER: the caller does).
        while True:
            if forever:
                poll = self.max_poll
            elif wait_s > 0:
                poll = min(max(wait_end - time.monotonic(), 0.0), self.max_poll)
                if 0 < poll < 0.001:
                    poll = 0.001
            else:
                poll = 0.0
            poll_ms = int(poll * 1000)
            sent = time.monotonic()
            payload: Dict[str, Any] = {"ttl_ms": ttl_ms, "wait_ms": poll_ms, "request_id": rid}
            if owner:
                payload["owner"] = owner
            payload.update(kind)
            try:
                out = self._post_json(op, name, path, payload, timeout=self.timeout + poll)
            except HeldError:
                if forever or wait_end - time.monotonic() > 0:
                    backoff = _MIN_BACKOFF
                    continue  # the server's poll ended before our wait: poll again
                raise
            except UnavailableError:
                left = math.inf if forever else wait_end - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(backoff, left))
                backoff = min(2 * backoff, _MAX_BACKOFF)
                continue
            return self._lease_from(op, name, out, sent, auto_renew, kind.get("limit", 1))

    def _lease_from(
        self, op: str, name: str, out: Dict[str, Any], sent: float, auto_renew: bool, limit: int
    ) -> Lease:
        token: Any = out.get("token")
        # A permit's answer carries its slot in [0, limit); a lock's has none.
        slot: Any = out.get("slot") if limit > 1 else out.get("slot", 0)
        lease_id: Any = out.get("lease")
        ttl_ms: Any = out.get("ttl_ms")
        waited_ms: Any = out.get("waited_ms", 0)
        if (
            out.get("name") != name
            or not _is_int(token)
            or not 1 <= token <= MAX_TOKEN
            or not isinstance(lease_id, str)
            or not _valid_lease_id(lease_id)
            or not _is_int(ttl_ms)
            or ttl_ms <= 0
            or not _is_int(waited_ms)
            or waited_ms < 0
            or not _is_int(slot)
            or not 0 <= slot < limit
        ):
            raise self._malformed(op, name)
        # The store started the TTL waited_ms (rounded down) after the server got the
        # request, which left here at `sent`; never date the lease after now.
        start = min(sent + waited_ms / 1000.0, time.monotonic())
        return Lease(self, name, token, lease_id, ttl_ms / 1000.0, start, auto_renew, slot=slot)

    def lock(
        self,
        name: str,
        ttl: float = 30,
        wait: Optional[float] = FOREVER,
        *,
        owner: Optional[str] = None,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> LockContext:
        """Returns a context manager that acquires the lock ``name`` on entry (waiting
        up to ``wait`` seconds; FOREVER by default, None or 0 tries once), renews it
        every ttl/3 seconds in a daemon thread while the block runs (retrying
        transient failures until the local deadline), and releases it on exit, also
        when the block raises::

            with client.lock("nightly", ttl=30, wait=60) as lease:
                client.put("ledger", b"...", lease=lease)

        The lease's ``lost`` event is set if the lease is lost meanwhile (a renewal
        refused, or the deadline passed without a successful renewal). ``owner``,
        ``limit`` and ``shared`` are acquire's. Entry raises what acquire raises.
        """
        return LockContext(self, name, ttl, wait, owner, limit=limit, shared=shared)

    def heal(self, name: str, seen: int) -> None:
        """Tells the server that a guard saw token ``seen`` for lock ``name``, so that
        the lock's next grant gets a higher token (after a store's counter went
        backwards, e.g. a Redis failover). Healing again is safe: it never lowers a
        counter.

        Raises InvalidError for a bad name or token, NotSupportedError if the server's
        store has nothing to heal, UnavailableError if the server cannot be reached.
        """
        op = "heal"
        name = _check_name(op, name)
        seen = _check_token(op, name, seen, field="seen")
        self._post_json(op, name, "/v1/locks/%s/heal" % escape_name(name), {"seen": seen})

    def status(self, name: str) -> Dict[str, Any]:
        """Returns the state of the lock ``name`` as the server reports it: a dict with
        "name", "held" and, when known, "token", "owner" (while held, if the holder
        named one), "last_token" and "expires_in_ms". A semaphore with live permits
        adds "limit" and a shared lock with live shared leases "shared": True, and
        both "holders": every live lease as a dict with "slot", "token", "owner" (if
        it named one) and "expires_in_ms", in slot order (semaphore) or token order
        (shared); "token", "owner" and "expires_in_ms" are then the highest token's.

        Raises InvalidError for a bad name, NotSupportedError if the server's store
        cannot report state, UnavailableError if the server cannot be reached.
        """
        op = "inspect"
        name = _check_name(op, name)
        _, _, raw = self._request(op, name, "GET", "/v1/locks/%s" % escape_name(name))
        return self._object(op, name, raw)

    def list(self, prefix: Optional[str] = None, limit: Optional[int] = None, all: bool = False) -> List[Dict[str, Any]]:
        """Returns the held locks whose names start with ``prefix`` (every lock
        without it), in name order, each a dict as status returns it; with
        ``all=True`` also the free names the server's store knows ("held": False,
        with their "last_token"). ``limit`` caps the count (None or 0: no cap; at most
        10000).

        Raises InvalidError for a bad prefix, limit or all, NotSupportedError if the
        server's store cannot list, UnavailableError if the server cannot be reached.
        """
        op = "list"
        query: Dict[str, str] = {}
        if prefix is not None:
            query["prefix"] = _check_name(op, prefix, field="prefix")
        if limit is not None:
            if not _is_int(limit) or not 0 <= limit <= 10000:
                raise _invalid(op, "", "limit", str(limit), "must be an integer from 0 to 10000")
            if limit > 0:
                query["limit"] = str(limit)
        if not isinstance(all, bool):
            raise _invalid(op, "", "all", str(all), "must be a bool")
        if all:
            query["all"] = "true"
        path = "/v1/locks" + ("?" + urllib.parse.urlencode(query) if query else "")
        _, _, raw = self._request(op, "", "GET", path)
        locks = self._object(op, "", raw).get("locks")
        if not isinstance(locks, list) or not _all_dicts(locks):
            raise self._malformed(op, "")
        return locks

    def watch(
        self,
        name: str,
        wait: Optional[float] = None,
        *,
        stop: Optional[threading.Event] = None,
        on_unavailable: Optional[Callable[[UnavailableError], None]] = None,
    ) -> Generator[Dict[str, Any], None, None]:
        """Follows the state of the lock ``name``: a generator that yields its state
        at once, then its state after each change (an acquire, release, expiry,
        revoke or heal), until stopped. Each state is the dict status() returns, plus
        "index": the lock's change index (the server's Fence-Index, at least 1; the
        same while the lock is unchanged, a renewal being no change)::

            for state in client.watch("deploy"):
                print(state["held"], state.get("owner"))

        Each step is one blocking query (GET /v1/locks/NAME?index=N&wait_ms=W, N the
        last index) that the server answers when the lock changes, woken by its
        store. ``wait`` is W in seconds, at most max_poll (the default; the server
        cuts it to its --max-wait): a query whose wait passed with no change is asked
        again, unseen, so it matters only to a proxy that drops idle requests sooner.
        A consumer that falls behind skips states but always gets the latest next,
        never an older one after a newer: nothing is buffered, each query is sent
        when the loop asks for the next state.

        To stop: leave the loop (break), or call close() on the generator, from the
        thread that iterates it; or set ``stop``, a threading.Event, from any thread:
        the generator then ends at once (within 50ms), the query in flight aborted.
        For a deadline, ``threading.Timer(seconds, stop.set).start()``.

        While the server cannot be reached or answers 503 (restarting, draining),
        the watch backs off (50ms, doubling to 1s) and asks again, calling
        ``on_unavailable`` with the UnavailableError first if given (raise from it to
        end the watch with that error), so it rides out a restart of the server.

        Raises InvalidError at once for a bad name, wait or callback. The generator
        raises NotSupportedError if the server cannot answer blocking queries (a
        store that cannot watch: 501; a server older than blocking queries, known by
        its answer without a Fence-Index header), and any other error answer of the
        server (UnauthorizedError, ...), and ends.
        """
        return self._watch(*self._watch_args("watch", name, wait, stop, on_unavailable))

    def leader(self, name: str) -> Leader:
        """Returns the leader of the election ``name`` (the holder of its lock, as
        ``fence elect`` and ``fence leader`` use it): ``leading`` False, with epoch 0,
        if nobody leads; that is an answer, not an error.

        Raises what status() raises.
        """
        name = _check_name("leader", name)
        return _leader_of(self.status(name))

    def observe_leader(
        self,
        name: str,
        wait: Optional[float] = None,
        *,
        stop: Optional[threading.Event] = None,
        on_unavailable: Optional[Callable[[UnavailableError], None]] = None,
    ) -> Generator[Leader, None, None]:
        """Follows the leader of the election ``name``: a generator that yields the
        current Leader at once, then each change of leader: a new term (a new epoch)
        or the end of one (a vacancy: ``leading`` False, epoch 0). A renewal is not a
        change. An observer that falls behind skips terms but always gets the latest
        leader, never an older one after a newer. It is watch() of the election's
        lock, with its arguments, ways to stop and errors::

            for leader in client.observe_leader("scheduler", stop=shutdown):
                print(leader.owner if leader.leading else "no leader", leader.epoch)
        """
        return _leader_changes(self._watch(*self._watch_args("observe", name, wait, stop, on_unavailable)))

    def _watch_args(
        self,
        op: str,
        name: Any,
        wait: Any,
        stop: Any,
        on_unavailable: Any,
    ) -> Tuple[str, int, Optional[threading.Event], Optional[Callable[[UnavailableError], None]]]:
        name = _check_name(op, name)
        wait_ms = _check_query_wait(op, name, wait, self.max_poll)
        if stop is not None and not isinstance(stop, threading.Event):
            raise _invalid(op, name, "stop", None, "must be a threading.Event, got %s" % type(stop).__name__)
        if on_unavailable is not None and not callable(on_unavailable):
            raise _invalid(op, name, "on_unavailable", None, "must be callable, got %s" % type(on_unavailable).__name__)
        return name, wait_ms, stop, on_unavailable

    def _watch(
        self,
        name: str,
        wait_ms: int,
        stop: Optional[threading.Event],
        on_unavailable: Optional[Callable[[UnavailableError], None]],
    ) -> Generator[Dict[str, Any], None, None]:
        aborter = _Aborter()
        opener = self._new_opener(aborter)
        ended = threading.Event()
        if stop is not None:
            threading.Thread(
                target=_abort_on_stop, args=(stop, aborter, ended), name="fence-watch-%s" % name, daemon=True
            ).start()
        def stopped() -> bool:
            return aborter.aborted or (stop is not None and stop.is_set())

        try:
            index = 0  # the last index yielded; 0 before the first (every index is at least 1)
            backoff = 0.0
            while not stopped():
                try:
                    state = self._blocking_query(name, index, wait_ms, opener)
                except FenceError as e:
                    if stopped():
                        return  # the query was cut short by the stop
                    if not isinstance(e, UnavailableError):
                        raise
                    if on_unavailable is not None:
                        on_unavailable(e)
                    backoff = min(max(2 * backoff, _MIN_BACKOFF), _MAX_BACKOFF)
                    if stop is not None:
                        stop.wait(backoff)
                    else:
                        time.sleep(backoff)
                    continue
                finally:
                    aborter.done()
                backoff = 0.0
                if state["index"] != index:
                    index = state["index"]
                    yield state
        finally:
            ended.set()

    def _blocking_query(
        self, name: str, index: int, wait_ms: int, opener: urllib.request.OpenerDirector
    ) -> Dict[str, Any]:
        """Sends one blocking query of a watch and returns the state the server
        answered with, its Fence-Index as "index"."""
        op = "watch"
        path = "/v1/locks/%s?index=%d&wait_ms=%d" % (escape_name(name), index, wait_ms)
        _, headers, raw = self._request(op, name, "GET", path, timeout=self.timeout + wait_ms / 1000.0, opener=opener)
        state = self._object(op, name, raw)
        if state.get("name") != name:
            raise self._malformed(op, name)
        v = headers.get(HEADER_INDEX)
        if v is None:
            # A server older than blocking queries ignores index and answers at once:
            # asking again would be a busy loop.
            raise NotSupportedError(
                "%s: the fence server at %s does not answer blocking queries (no %s header): it is older than this client"
                % (_op_name(op, name), self.server, HEADER_INDEX),
                status=200,
                code="not_implemented",
            )
        if not (v.isascii() and v.isdigit()) or int(v) < 1:
            raise self._malformed(op, name)
        state["index"] = int(v)
        return state

    def revoke(self, name: str) -> None:
        """Ends the current lease of the lock ``name`` now, whoever holds it, and wakes
        the server's waiters: an operator's force-release. The revoked holder learns it
        at its next renewal (its ``lost`` event is set), but a paused holder can still
        write with its old token until the next holder writes or fences the resource
        (fence()): revoke only locks whose resources are fenced.

        Raises NotHeldError (404 "not_held") if no unexpired lease holds the lock
        (nothing changed), NotSupportedError if the server's store cannot revoke,
        InvalidError for a bad name, UnavailableError if the server cannot be reached
        (revoking again is safe: it then raises NotHeldError).
        """
        op = "revoke"
        name = _check_name(op, name)
        out = self._post_json(op, name, "/v1/locks/%s/revoke" % escape_name(name), {})
        if out.get("name") != name or out.get("revoked") is not True:
            raise self._malformed(op, name)

    # --- the fenced KV store ---

    def _fence_headers(
        self, op: str, key: str, lease: Optional[Lease], lock: Optional[str], token: Optional[int], lease_id: Optional[str]
    ) -> Dict[str, str]:
        if lease is not None:
            if not isinstance(lease, Lease):
                raise _invalid(op, key, "lease", None, "must be a fence.Lease, got %s" % type(lease).__name__)
            if lock is not None or token is not None or lease_id is not None:
                raise _invalid(op, key, "lease", None, "give either a lease or lock and token, not both")
            return lease.headers()
        if lock is None:
            raise _invalid(
                op, key, HEADER_LOCK, None, "is required: name the lock whose counter issued the token (or pass lease=)"
            )
        lock = _check_name(op, lock, field=HEADER_LOCK, subject=key)
        if token is None:
            raise _invalid(op, key, HEADER_TOKEN, None, "is required (or pass lease=)")
        token = _check_token(op, key, token, field=HEADER_TOKEN)
        h = {HEADER_TOKEN: str(token), HEADER_LOCK: _escape_header(lock)}
        if lease_id is not None:
            h[HEADER_LEASE] = _check_lease_id(op, key, lease_id, field=HEADER_LEASE)
        return h

    def put(
        self,
        key: str,
        value: Value,
        lease: Optional[Lease] = None,
        lock: Optional[str] = None,
        token: Optional[int] = None,
        *,
        lease_id: Optional[str] = None,
        attempt: Optional[str] = None,
    ) -> None:
        """Stores ``value`` (bytes, or str as UTF-8) under ``key`` if the key's fence
        admits the write: pass the ``lease`` it is written under, or the ``lock`` name
        and ``token`` (and optionally ``lease_id``; without it an equal token is
        refused).

        Every attempt of the call carries one attempt id (Fence-Attempt): ``attempt``
        (1 to 64 bytes of printable ASCII without spaces; give your own to retry a
        write across calls or processes), or 128 random bits. The store applies the
        attempt that reaches it first and answers a later one as its success with
        nothing written, so a slow first attempt never replaces a later write.

        Raises StaleTokenError (``highest``: the token the key has accepted) or
        WrongLockError (the key is fenced by another lock) when the write is refused;
        it then changed nothing. Raises InvalidError for a bad key, value or fence,
        TooLargeError for a value over the server's limit, NotSupportedError if the
        server has no KV store, UnavailableError if the server cannot be reached (the
        write may or may not have happened).
        """
        op = "put"
        key = _check_name(op, key, field="key")
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        else:
            raise _invalid(op, key, "value", None, "must be bytes or str, got %s" % type(value).__name__)
        h = self._fence_headers(op, key, lease, lock, token, lease_id)
        h[HEADER_ATTEMPT] = _attempt_id(op, key, attempt)
        h["Content-Type"] = "application/octet-stream"
        self._request(op, key, "PUT", "/v1/kv/%s" % escape_name(key), body=data, headers=h)

    def fence(
        self,
        key: str,
        lease: Optional[Lease] = None,
        lock: Optional[str] = None,
        token: Optional[int] = None,
        *,
        lease_id: Optional[str] = None,
    ) -> None:
        """Advances ``key``'s fence to the lease's token (or ``lock`` and ``token``)
        without writing a value, fencing off every older holder at once.

        Raises what put raises, and NotSupportedError if the server's store cannot
        fence without writing.
        """
        op = "fence"
        key = _check_name(op, key, field="key")
        h = self._fence_headers(op, key, lease, lock, token, lease_id)
        self._request(op, key, "POST", "/v1/fences/%s" % escape_name(key), headers=h)

    def delete(
        self,
        key: str,
        lease: Optional[Lease] = None,
        lock: Optional[str] = None,
        token: Optional[int] = None,
        *,
        lease_id: Optional[str] = None,
        attempt: Optional[str] = None,
    ) -> None:
        """Removes ``key``'s value if the key's fence admits the delete, as put admits
        a write (pass the ``lease``, or ``lock`` and ``token`` and optionally
        ``lease_id``). The key keeps its fence, now this delete's, so a stale writer is
        still refused; get then returns an Item whose value is None. Its attempts
        carry one attempt id (``attempt``), as put's do.

        Raises NotFoundError if the key holds no value (never written, only fenced, or
        already deleted; nothing changed), and what put raises otherwise.
        """
        op = "delete"
        key = _check_name(op, key, field="key")
        h = self._fence_headers(op, key, lease, lock, token, lease_id)
        h[HEADER_ATTEMPT] = _attempt_id(op, key, attempt)
        self._request(op, key, "DELETE", "/v1/kv/%s" % escape_name(key), headers=h)

    def purge(self, key: str) -> None:
        """Purges ``key``: removes its value and its fence, so that the next write under
        any lock is admitted. An admin's operation (the admin right, with scoped
        tokens), and the one way a key's fence goes back: for a key fenced under the
        wrong lock.

        Raises NotFoundError if the key has neither a value nor a fence,
        NotSupportedError if the server's store cannot purge, InvalidError for a bad
        key, UnavailableError if the server cannot be reached.
        """
        op = "purge"
        key = _check_name(op, key, field="key")
        self._request(op, key, "DELETE", "/v1/kv/%s?purge=true" % escape_name(key))

    def get(self, key: str) -> Item:
        """Returns the value under ``key`` with the key's fence (the lock and the
        highest token it accepted); the value is None when the key is fenced but holds
        none (only fenced, or its value deleted).

        Raises NotFoundError if the key was never written nor fenced (or was purged),
        InvalidError for a bad key, NotSupportedError if the server has no KV store,
        UnavailableError if the server cannot be reached.
        """
        op = "get"
        key = _check_name(op, key, field="key")
        status, headers, data = self._request(op, key, "GET", "/v1/kv/%s" % escape_name(key), fenced_404=True)
        tok = headers.get(HEADER_TOKEN, "")
        try:
            lock = urllib.parse.unquote(headers.get(HEADER_LOCK, ""), errors="strict")
        except UnicodeDecodeError:
            lock = ""
        if not tok.isdigit() or not lock:
            raise self._malformed(op, key)
        return Item(value=None if status == 404 else data, token=int(tok), lock=lock)


# --- Lease --------------------------------------------------------------------------


class Lease:
    """Lease is one grant of a lock: its ``name``, fencing ``token`` and lease ``id``,
    and what the holder knows of its expiry. Client.acquire and Client.lock make
    leases. A Lease is safe to use from several threads.

    ``lost`` is a threading.Event set as soon as the holder can no longer be sure it
    holds the lock: a renewal was refused (NotHeldError), or the local deadline
    passed without a successful renewal. ``lost_reason`` then says why. This is
    advisory: it narrows the window in which a paused holder acts on a lost lock,
    it never closes it. Writes must carry the token (``headers()``, or
    ``Client.put(..., lease=lease)``) to a resource that checks it.

    A Lease is also a context manager that releases it on exit.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        token: int,
        lease_id: str,
        ttl: float,
        start: float,
        auto_renew: bool,
        *,
        slot: int = 0,
    ) -> None:
        self._client = client
        self.name: str = name
        """The lock name."""
        self.token: int = token
        """The fencing token of this grant."""
        self.slot: int = slot
        """The permit's slot, in [0, limit), of a lease on a semaphore (acquire's
        ``limit``): no two unexpired leases on the name share a slot, so a resource per
        slot is fenced by the name's tokens as a lock's resource is. 0 for a lock and
        for a shared lease."""
        self.id: str = lease_id
        """The lease id. It is a credential: whoever has it can renew or release the lease."""
        self.lost: threading.Event = threading.Event()
        """Set when the lease is lost (see Lease)."""
        self.lost_reason: Optional[FenceError] = None
        """Why the lease was lost (a NotHeldError), or None while it is not."""
        self._cond = threading.Condition()
        self._op_lock = threading.Lock()  # serialises renew and release, so deadlines follow the server's order
        self._ttl = ttl
        self._deadline = start + ttl
        self._auto = auto_renew
        self._next_renew = start + ttl / 3
        self._released = False
        self._watcher = threading.Thread(target=self._watch, name="fence-lease-%s" % name, daemon=True)
        self._watcher.start()

    def __repr__(self) -> str:  # never the lease id: it is a credential
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return "fence.Lease(name=%r, token=%d, %s)" % (self.name, self.token, state)

    @property
    def ttl(self) -> float:
        """The TTL of the last grant or renewal, in seconds."""
        with self._cond:
            return self._ttl

    @property
    def deadline(self) -> float:
        """The local deadline on the time.monotonic() clock: after it the lease may
        have expired at the server."""
        with self._cond:
            return self._deadline

    @property
    def expires_in(self) -> float:
        """Seconds left until the local deadline; 0 once the lease is lost or released."""
        with self._cond:
            if self._ended_locked():
                return 0.0
            return max(self._deadline - time.monotonic(), 0.0)

    @property
    def released(self) -> bool:
        """True once release() succeeded (or found the lease gone)."""
        with self._cond:
            return self._released

    @property
    def held(self) -> bool:
        """True while the lease is neither released nor lost (by the local clock)."""
        return self.expires_in > 0

    def headers(self) -> Dict[str, str]:
        """Returns the headers of a write fenced by this lease: Fence-Token,
        Fence-Lock (escaped as a path segment) and Fence-Lease. Send them to any
        resource that checks fencing tokens; they hold the lease id, a credential."""
        return {HEADER_TOKEN: str(self.token), HEADER_LOCK: _escape_header(self.name), HEADER_LEASE: self.id}

    # --- renew and release ---

    def renew(self, ttl: Optional[float] = None) -> None:
        """Extends the lease to ``ttl`` seconds from now (None: the current TTL).

        Raises NotHeldError if the server says the lease is gone (``lost`` is then
        set), or if it is already lost or released; InvalidError for a bad ttl;
        other errors (UnavailableError) leave the local deadline as it was.
        """
        self._renew(self._ttl if ttl is None else ttl, None)

    def _renew(self, ttl: float, timeout: Optional[float]) -> None:
        op = "renew"
        ttl_ms = _check_ttl(op, self.name, ttl)
        with self._op_lock:
            self._raise_if_ended(op)
            sent = time.monotonic()
            try:
                self._client._post_json(
                    op,
                    self.name,
                    "/v1/locks/%s/renew" % escape_name(self.name),
                    {"lease": self.id, "ttl_ms": ttl_ms},
                    timeout=timeout,
                )
            except NotHeldError as e:
                self._lose(e)
                raise
            with self._cond:
                self._raise_if_ended(op)  # lost while the request was in flight
                self._ttl = ttl_ms / 1000.0
                self._deadline = sent + self._ttl
                self._next_renew = sent + self._ttl / 3
                self._cond.notify_all()

    def release(self) -> None:
        """Releases the lease, which wakes the server's waiters, and stops its
        renewal. Releasing a released lease does nothing.

        Raises NotHeldError if the server no longer had the lease (``lost`` is then
        set); UnavailableError if the server cannot be reached, with the lease left
        as it was so that release can be retried.
        """
        op = "release"
        with self._op_lock:
            with self._cond:
                if self._released:
                    return
            try:
                self._client._post_json(
                    op, self.name, "/v1/locks/%s/release" % escape_name(self.name), {"lease": self.id}, gone_ok=True
                )
            except NotHeldError as e:
                self._lose(e)
                self._set_released()
                raise
            self._set_released()

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        _release_on_exit(self, exc is not None)

    # --- state ---

    def _ended_locked(self) -> bool:
        return self._released or self.lost.is_set()

    def _raise_if_ended(self, op: str) -> None:
        with self._cond:
            if self._released:
                raise NotHeldError("%s %s: lease released" % (op, quote(self.name)), code="not_held")
            if self.lost.is_set():
                reason = self.lost_reason
                fact = "lease lost"
                if reason is not None and reason.status is None:
                    fact = "lease expired before it was renewed"
                elif reason is not None:
                    fact = "lease not held (expired, released, or never granted)"
                raise NotHeldError("%s %s: %s" % (op, quote(self.name), fact), code="not_held")

    def _set_released(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def _lose(self, reason: FenceError) -> None:
        with self._cond:
            if not self._ended_locked():
                self._lose_locked(reason)

    def _lose_locked(self, reason: FenceError) -> None:
        self.lost_reason = reason
        self.lost.set()
        self._cond.notify_all()

    def _watch(self) -> None:
        """Sets lost at the local deadline, and renews the lease first if it is
        auto-renewing: at ttl/3 after each successful renewal, again at ttl/10 after
        a transient failure, until the deadline. Ends when the lease does."""
        while True:
            with self._cond:
                while True:
                    if self._ended_locked():
                        return
                    now = time.monotonic()
                    if now >= self._deadline:
                        self._lose_locked(
                            NotHeldError(
                                "lock %s: lease expired before it was renewed" % quote(self.name), code="not_held"
                            )
                        )
                        return
                    wake = self._deadline
                    if self._auto:
                        if now >= self._next_renew:
                            break
                        wake = min(wake, self._next_renew)
                    self._cond.wait(wake - now)
                ttl, left = self._ttl, self._deadline - time.monotonic()
            try:
                # A renewal answered after the deadline is of no use: bound it by that.
                self._renew(ttl, timeout=min(self._client.timeout, max(left, 0.001)))
            except NotHeldError:
                return  # lost (set by _renew) or released meanwhile
            except FenceError:
                with self._cond:
                    self._next_renew = time.monotonic() + max(ttl / 10, 0.001)
            except Exception as e:  # a bug must not silently stop the renewal: count the lease as lost
                self._lose(FenceError("renew %s: %s: %s" % (quote(self.name), type(e).__name__, e), code="internal"))
                return

    def _stop_renewal(self) -> None:
        with self._cond:
            self._auto = False
            self._cond.notify_all()


def _release_on_exit(lease: Lease, body_raised: bool) -> None:
    """Releases lease at the end of a with block. A lease already gone (NotHeldError)
    is what release wants: lost says so. Another failure is raised, unless the block
    raised, whose exception it must not hide, or the lease was lost already (it then
    expires after its TTL at the latest)."""
    lease._stop_renewal()
    try:
        lease.release()
    except NotHeldError:
        pass
    except FenceError:
        if not body_raised and not lease.lost.is_set():
            raise


class LockContext:
    """LockContext is what Client.lock and fence.lock return: a context manager whose
    entry acquires an auto-renewing Lease and whose exit releases it (see
    Client.lock)."""

    def __init__(
        self,
        client: Client,
        name: str,
        ttl: float,
        wait: Optional[float],
        owner: Optional[str] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl
        self._wait = wait
        self._owner = owner
        self._limit = limit
        self._shared = shared
        self.lease: Optional[Lease] = None
        """The lease, once entered."""

    def __enter__(self) -> Lease:
        if self.lease is not None:
            raise InvalidError(
                "lock %s: this lock() context is already in use; call lock() again" % quote(self._name),
                field="lock",
            )
        self.lease = self._client.acquire(
            self._name, self._ttl, self._wait, auto_renew=True, owner=self._owner, limit=self._limit, shared=self._shared
        )
        return self.lease

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self.lease is not None:
            _release_on_exit(self.lease, exc is not None)


# --- the default client ---

_default: Optional[Client] = None
_default_mu = threading.Lock()


def default_client() -> Client:
    """Returns the client of the module-level functions, made on first use from
    $FENCE_SERVER and $FENCE_AUTH_TOKEN. Raises InvalidError if FENCE_SERVER is not
    a valid server URL."""
    global _default
    with _default_mu:
        if _default is None:
            _default = Client()
        return _default


def lock(
    name: str,
    ttl: float = 30,
    wait: Optional[float] = FOREVER,
    *,
    owner: Optional[str] = None,
    limit: Optional[int] = None,
    shared: bool = False,
) -> LockContext:
    """Client.lock on the default client (see default_client)::

    with fence.lock("nightly", ttl=30) as lease:
        ...
    """
    return default_client().lock(name, ttl, wait, owner=owner, limit=limit, shared=shared)
