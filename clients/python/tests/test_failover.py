"""Tests of the Python client with several servers: a request moves to the next
when one cannot be reached, fails, or answers 503, and the client keeps the server
that answered. Each server here has a store of its own (the single-node store);
what a shared store adds (a retried acquire finding its grant by request id) is
tested in Go against etcd."""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import threading
import time
import unittest
import urllib.request
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, answer, cleanup_bin, serve_stand_in, unique  # noqa: E402


def tearDownModule() -> None:
    cleanup_bin()


def closed_port() -> int:
    """Returns a 127.0.0.1 port that nothing listens on (it was free a moment ago)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _CutOff(http.server.BaseHTTPRequestHandler):
    """A stand-in for a node cut off from the majority: it answers every request
    503 unavailable, and keeps the bodies it was sent."""

    bodies: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with _CutOff.lock:
            _CutOff.bodies.append(json.loads(raw or b"{}"))
        self._unavailable()

    def do_GET(self) -> None:  # noqa: N802
        with _CutOff.lock:
            _CutOff.bodies.append({})
        self._unavailable()

    def _unavailable(self) -> None:
        body = json.dumps({"error": "store unavailable: no majority", "code": "unavailable"}).encode()
        answer(self, 503, {"Content-Type": "application/json"}, body)

    def log_message(self, *args: Any) -> None:
        pass


def _dropping(target: str) -> type:
    """Returns the handler of a stand-in for a server whose acquire answers are
    lost: it passes each acquire on to the real server at target, keeps the
    answer, and closes the connection without sending it."""

    class _Dropping(http.server.BaseHTTPRequestHandler):
        answers: List[Dict[str, Any]] = []

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            req = urllib.request.Request(
                target + self.path, data=raw, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as resp:
                _Dropping.answers.append(json.loads(resp.read()))
            self.close_connection = True  # no answer: the client sees the connection end

        def log_message(self, *args: Any) -> None:
            pass

    return _Dropping


class FailoverTest(unittest.TestCase):
    def test_acquire_whose_answer_is_lost_gets_the_same_grant_from_the_retry(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        handler = _dropping(srv.url)
        drop = serve_stand_in(self, handler)
        c = fence.Client("%s,%s" % (drop, srv.url))
        name = unique("fo-lost")
        lease = c.acquire(name, ttl=10)
        self.assertEqual(len(handler.answers), 1, handler.answers)
        lost = handler.answers[0]
        self.assertEqual((lease.token, lease.id), (lost["token"], lost["lease"]), "the retry's grant is the lost one")
        state = fence.Client(srv.url).status(name)
        self.assertTrue(state["held"])
        self.assertEqual((state["token"], state.get("last_token")), (lease.token, lease.token), "no second grant")
        lease.release()

    def test_503_moves_on_with_the_same_request_id_and_the_answering_server_is_kept(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        cut = serve_stand_in(self, _CutOff)
        with _CutOff.lock:
            _CutOff.bodies.clear()
        c = fence.Client("%s,%s" % (cut, srv.url))
        self.assertEqual(c.servers, (cut, srv.url))
        self.assertEqual(c.server, cut)
        lease = c.acquire(unique("fo"), ttl=10)
        self.assertEqual(c.server, srv.url)
        with _CutOff.lock:
            sent = list(_CutOff.bodies)
        self.assertEqual(len(sent), 1, sent)
        self.assertRegex(sent[0].get("request_id", ""), r"^[0-9a-f]{32}$")
        lease.renew()
        c.status(lease.name)
        lease.release()
        with _CutOff.lock:
            self.assertEqual(len(_CutOff.bodies), 1, "the client kept to the server that answered")

        # A caller's request id is sent as given, and a bad one is refused at once.
        lease = c.acquire(unique("fo"), ttl=10, request_id="job-42-attempt")
        lease.release()
        for bad in ["", "a b", "x" * 129, "caf\u00e9", 7]:
            with self.assertRaises(fence.InvalidError, msg=repr(bad)):
                c.acquire("job", request_id=bad)  # type: ignore[arg-type]

    def test_unreachable_servers_are_passed_over_and_named(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        dead = "http://127.0.0.1:%d" % closed_port()
        c = fence.Client(dead, servers=[srv.url])
        lease = c.acquire(unique("fo"), ttl=10)
        self.assertEqual(c.server, srv.url)
        lease.release()

        other = "http://127.0.0.1:%d" % closed_port()
        with self.assertRaises(fence.UnavailableError) as cm:
            fence.Client("%s,%s" % (dead, other)).acquire("job")
        self.assertEqual(
            str(cm.exception),
            "cannot reach the fence server at %s: connection refused; at %s: connection refused" % (dead, other),
        )
        with self.assertRaises(fence.InvalidError):
            fence.Client(dead + ",")

    def test_waiting_acquire_whose_server_stops_moves_to_the_next(self) -> None:
        a, b = FenceServer(), FenceServer()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        name = unique("fo-wait")
        fence.Client(a.url).acquire(name, ttl=60)  # held on a until a stops
        c = fence.Client("%s,%s" % (a.url, b.url))
        got: List[Any] = []

        def wait() -> None:
            try:
                got.append(c.acquire(name, ttl=10, wait=30))
            except fence.FenceError as e:
                got.append(e)

        t = threading.Thread(target=wait, daemon=True)
        started = time.monotonic()
        t.start()
        time.sleep(0.3)  # its long poll is on a
        a.stop()  # draining, a ends its long polls with 503, then exits
        t.join(20)
        self.assertFalse(t.is_alive(), "the waiting acquire did not end within 20s of its server's stop")
        self.assertIsInstance(got[0], fence.Lease, got)
        self.assertEqual(c.server, b.url)
        self.assertLess(time.monotonic() - started, 15)
        got[0].release()


if __name__ == "__main__":
    unittest.main()
