"""Tests of the Python client against a node whose cluster elects a leader: it
answers 503 for a while, and a waiting acquire rides that out within its wait,
with one server as with a list, under one request id (issue 36, item 6)."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import unittest
import urllib.error
import urllib.request
from typing import Any, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, answer, cleanup_bin, serve_stand_in, unique  # noqa: E402

NO_LEADER = "store unavailable: the cluster has no leader"


def tearDownModule() -> None:
    cleanup_bin()


def _electing(target: str, refuse: int) -> type:
    """Returns the handler of a stand-in for a node electing its leader: it
    answers the first refuse acquires 503 unavailable (no leader), passes every
    other request on to the real server at target, and keeps the request id of
    every acquire."""

    class _Electing(http.server.BaseHTTPRequestHandler):
        rids: List[Any] = []
        lock = threading.Lock()

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.endswith("/acquire"):
                with _Electing.lock:
                    _Electing.rids.append(json.loads(raw or b"{}").get("request_id"))
                    refused = len(_Electing.rids) <= refuse
                if refused:
                    body = json.dumps({"error": 'acquire "x": ' + NO_LEADER, "code": "unavailable"}).encode()
                    answer(self, 503, {"Content-Type": "application/json"}, body)
                    return
            req = urllib.request.Request(
                target + self.path, data=raw, headers={"Content-Type": "application/json"}, method="POST"
            )
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(req, timeout=10) as resp:
                    status, data = resp.status, resp.read()
            except urllib.error.HTTPError as e:
                status, data = e.code, e.read()
                e.close()
            answer(self, status, {"Content-Type": "application/json"}, data)

        def log_message(self, *args: Any) -> None:
            pass

    return _Electing


class ElectionTest(unittest.TestCase):
    def test_one_server_503_is_ridden_out_within_the_wait_under_one_request_id(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        handler = _electing(srv.url, 3)
        c = fence.Client(serve_stand_in(self, handler))
        name = unique("x")
        # Without a wait, the 503 is the answer, and it says why.
        with self.assertRaises(fence.UnavailableError) as cm:
            c.acquire(name, ttl=10)
        self.assertEqual(str(cm.exception), 'acquire "x": ' + NO_LEADER)
        # With a wait, two more 503s cost only time.
        lease = c.acquire(name, ttl=10, wait=10)
        with handler.lock:
            rids = handler.rids[1:]
        self.assertEqual(len(rids), 3, "two 503s, then the grant: %r" % rids)
        self.assertRegex(rids[0] or "", r"^[0-9a-f]{32}$")
        self.assertEqual(set(rids), {rids[0]}, "one request id on every retry: %r" % rids)
        self.assertEqual(lease.name, name)
        lease.release()


if __name__ == "__main__":
    unittest.main()
