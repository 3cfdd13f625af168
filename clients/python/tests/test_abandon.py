"""An acquire given up while its outcome is unknown sends an abandon: a grant made
for it after all is released at once, not left for its TTL."""

from __future__ import annotations

import http.server
import os
import sys
import unittest
import urllib.error
import urllib.request
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, answer, cleanup_bin, serve_stand_in, unique  # noqa: E402


def tearDownModule() -> None:
    cleanup_bin()


def _losing(target: str) -> type:
    """Returns the handler of a stand-in for a server whose acquire answers are
    lost: it passes each request on to the real server at target, answers every
    other request, and closes an acquire's connection without its answer."""

    class _Losing(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            req = urllib.request.Request(
                target + self.path, data=raw, headers={"Content-Type": "application/json"}, method="POST"
            )
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(req, timeout=10) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read()
                e.close()
            if self.path.endswith("/acquire"):
                self.close_connection = True  # the answer is lost
                return
            answer(self, status, {"Content-Type": "application/json"}, body)

        def log_message(self, *args: Any) -> None:
            pass

    return _Losing


class AbandonTest(unittest.TestCase):
    def test_acquire_whose_answers_are_lost_abandons_its_grant(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        losing = serve_stand_in(self, _losing(srv.url))
        name = unique("abandon")
        with self.assertRaises(fence.UnavailableError):
            fence.Client(losing).acquire(name, ttl=30)
        state = fence.Client(srv.url).status(name)
        self.assertFalse(state["held"], "the abandoned grant was released, not left for its TTL")


if __name__ == "__main__":
    unittest.main()
