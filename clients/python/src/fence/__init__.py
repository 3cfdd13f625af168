"""fence: fenced distributed locks from Python, over the HTTP API of `fence serve`.

Standard library only. Every grant carries a fencing token; a resource that keeps the
highest token it has seen refuses writes of older holders. The server's fenced
key-value store is such a resource::

    import fence

    client = fence.Client()                  # $FENCE_SERVER, else http://127.0.0.1:7420
    with client.lock("nightly", ttl=30, wait=60) as lease:
        client.put("ledger", b"balance=100", lease=lease)

    with fence.lock("nightly", ttl=30) as lease:   # the same, on a default client
        ...

    with client.lock("exports", limit=3) as permit:   # one of 3 permits, each a slot
        client.put("export-%d" % permit.slot, b"batch 7", lease=permit)

    for state in client.watch("nightly"):        # its state now, then at each change
        print(state["held"], state["index"])

    for leader in client.observe_leader("scheduler"):   # an election's leader, per term
        print(leader.owner if leader.leading else "no leader", leader.epoch)

Errors are FenceError subclasses, one per error code of the API; their message is the
server's "error" line verbatim.
"""

from __future__ import annotations

from ._client import (
    DEFAULT_SERVER,
    FOREVER,
    Client,
    Item,
    Leader,
    Lease,
    LockContext,
    default_client,
    escape_name,
    lock,
)
from ._errors import (
    FenceError,
    HeldError,
    InternalError,
    InvalidError,
    LeaseRequiredError,
    LimitMismatchError,
    MethodNotAllowedError,
    NotFoundError,
    NotHeldError,
    NotSupportedError,
    StaleTokenError,
    TokenExhaustedError,
    TooLargeError,
    UnauthorizedError,
    UnavailableError,
    UnissuedTokenError,
    WrongLockError,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SERVER",
    "FOREVER",
    "Client",
    "Item",
    "Leader",
    "Lease",
    "LockContext",
    "default_client",
    "escape_name",
    "lock",
    "FenceError",
    "HeldError",
    "InternalError",
    "InvalidError",
    "LeaseRequiredError",
    "LimitMismatchError",
    "MethodNotAllowedError",
    "NotFoundError",
    "NotHeldError",
    "NotSupportedError",
    "StaleTokenError",
    "TokenExhaustedError",
    "TooLargeError",
    "UnauthorizedError",
    "UnavailableError",
    "UnissuedTokenError",
    "WrongLockError",
]
