"""A fenced write whose first attempt is slow is retried on the next server, and
the holder writes again; the first attempt then lands. Every attempt of a write
carries one Fence-Attempt, which the store claims: the late attempt writes
nothing, and the later value stays (P3)."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import unittest
import urllib.request
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, cleanup_bin, serve_stand_in, unique  # noqa: E402


def tearDownModule() -> None:
    cleanup_bin()


def _holding() -> Tuple[type, threading.Event]:
    """Returns the handler of a stand-in for a paused server, which keeps each write
    it gets (method, path, headers, body) and answers none until released, and the
    event that releases it."""
    release = threading.Event()

    class _Holding(http.server.BaseHTTPRequestHandler):
        held: List[Tuple[str, str, Dict[str, str], bytes]] = []

        def _hold(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            _Holding.held.append((self.command, self.path, dict(self.headers.items()), raw))
            release.wait(30)
            self.close_connection = True  # never answered

        do_PUT = _hold  # noqa: N815
        do_DELETE = _hold  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    return _Holding, release


def _land(base: str, req: Tuple[str, str, Dict[str, str], bytes]) -> int:
    """Sends a held write to the server at base, as the paused server would once it
    resumes; returns the status."""
    method, path, headers, body = req
    keep = {k: v for k, v in headers.items() if k.lower().startswith("fence-") or k.lower() == "content-type"}
    r = urllib.request.Request(base + path, data=body if method == "PUT" else None, headers=keep, method=method)
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(r, timeout=10) as resp:
        return int(resp.status)


class WriteAttemptTest(unittest.TestCase):
    def _late(self, op: str) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        handler, release = _holding()
        slow = serve_stand_in(self, handler)
        self.addCleanup(release.set)
        c = fence.Client("%s,%s" % (slow, srv.url), attempt_timeout=0.3)
        direct = fence.Client(srv.url)
        lease = direct.acquire(unique("late"), ttl=60, auto_renew=False)
        key = unique("late-key")
        if op == "delete":
            direct.put(key, "v0", lease)
            c.delete(key, lease)
        else:
            c.put(key, "v1", lease)
        self.assertEqual(len(handler.held), 1, "the first attempt reached the paused server")
        c.put(key, "v2", lease)
        self.assertEqual(_land(srv.url, handler.held[0]), 200, "the late first attempt")
        self.assertEqual(direct.get(key).text, "v2", "the holder's later write stays")
        sent = {k.lower(): v for k, v in handler.held[0][2].items()}
        self.assertRegex(sent.get("fence-attempt", ""), r"^[!-~]{1,64}$", "the first attempt named its write")
        lease.release()

    def test_put_whose_first_attempt_lands_late_never_replaces_a_later_write(self) -> None:
        self._late("put")

    def test_delete_whose_first_attempt_lands_late_never_replaces_a_later_write(self) -> None:
        self._late("delete")

    def test_attempt_id_is_the_callers_when_given_and_a_bad_one_is_refused(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        c = fence.Client(srv.url)
        lease = c.acquire(unique("attempt"), ttl=60, auto_renew=False)
        key = unique("attempt-key")
        c.put(key, "v1", lease, attempt="job-7-write-1")
        c.put(key, "v2", lease, attempt="job-7-write-2")
        c.put(key, "v1", lease, attempt="job-7-write-1")  # a retry of write 1, after write 2
        self.assertEqual(c.get(key).text, "v2")
        for bad in ["", "a b", "x" * 65, "caf\u00e9", 7]:
            with self.assertRaises(fence.InvalidError, msg="attempt %r" % (bad,)):
                c.put(key, "bad", lease, attempt=bad)  # type: ignore[arg-type]
            with self.assertRaises(fence.InvalidError, msg="attempt %r" % (bad,)):
                c.delete(key, lease, attempt=bad)  # type: ignore[arg-type]
        self.assertEqual(c.get(key).text, "v2")
        lease.release()


if __name__ == "__main__":
    unittest.main()
