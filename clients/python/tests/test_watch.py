"""Tests of watching a lock and observing a leader (blocking queries) against a real
`fence serve`. Only the older-server case talks to a stand-in: no fence serve built
from this tree answers without Fence-Index."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import sys
import threading
import time
import unittest
import urllib.parse
import urllib.request
from typing import Any, Callable, Generator, List, Optional, Tuple, TypeVar

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, answer, cleanup_bin, serve_stand_in, unique  # noqa: E402

# The shared server caps one blocking query at 300ms, so a watch of an unchanged lock
# asks again several times a second: the tests exercise the client's re-asking too.
SERVER_MAX_WAIT = "300ms"
# How soon a change must be seen: the server answers within milliseconds; this is for
# a machine busy with other tests.
PROMPT = 2.0
# The longest any watch of a test may run: a watchdog stops it then, so a watch that
# never yields fails the test instead of hanging it.
WATCHDOG = 20.0

server: Optional[FenceServer] = None
T = TypeVar("T")


def setUpModule() -> None:
    global server
    server = FenceServer("--max-wait", SERVER_MAX_WAIT)


def tearDownModule() -> None:
    if server is not None:
        server.close()
    cleanup_bin()


def timed_next(gen: Generator[T, None, None]) -> Tuple[T, float]:
    """Returns the next value of gen and the seconds it took; fails the test if gen
    ended (a watchdog's stop) instead."""
    t0 = time.monotonic()
    try:
        v = next(gen)
    except StopIteration:
        raise AssertionError("the watch ended after %.1fs without a new state" % (time.monotonic() - t0)) from None
    return v, time.monotonic() - t0


def later(seconds: float, fn: Callable[[], Any]) -> threading.Thread:
    """Runs fn in a thread after seconds (as another process acting meanwhile) and
    returns the thread; an exception of fn is kept in thread.error."""

    def run() -> None:
        time.sleep(seconds)
        try:
            fn()
        except BaseException as e:  # reported by the test that joins it
            t.error = e  # type: ignore[attr-defined]

    t = threading.Thread(target=run, daemon=True)
    t.error = None  # type: ignore[attr-defined]
    t.start()
    return t


def joined(t: threading.Thread) -> None:
    t.join(WATCHDOG)
    if t.is_alive():
        raise AssertionError("the helper thread did not finish")
    if t.error is not None:  # type: ignore[attr-defined]
        raise t.error  # type: ignore[attr-defined]


def in_flight(url: str) -> int:
    """Returns the server's count of blocking queries waiting."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^fence_blocking_queries_in_flight (\d+)$", text, re.M)
    assert m, "no fence_blocking_queries_in_flight in /metrics"
    return int(m.group(1))


def closed_port() -> int:
    """Returns a 127.0.0.1 port that nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(cond: Callable[[], bool], seconds: float) -> bool:
    """Polls cond every 20ms for at most seconds; returns whether it became true."""
    end = time.monotonic() + seconds
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


class Base(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.server = server
        self.client = fence.Client(server.url)  # the watcher
        self.other = fence.Client(server.url)  # the one changing the lock, as another process would

    def stop_event(self) -> threading.Event:
        """Returns a stop event set by a watchdog after WATCHDOG seconds and at the
        test's end."""
        stop = threading.Event()
        dog = threading.Timer(WATCHDOG, stop.set)
        dog.daemon = True
        dog.start()
        self.addCleanup(dog.cancel)
        self.addCleanup(stop.set)
        return stop


class TestWatch(Base):
    def test_first_state_at_once_then_each_acquire_release_and_revoke_promptly(self) -> None:
        name = unique("watch")
        w = self.client.watch(name, stop=self.stop_event())
        self.addCleanup(w.close)
        first, took = timed_next(w)
        self.assertLess(took, 1.0, "first state after %.3fs, want at once" % took)
        self.assertEqual({k: v for k, v in first.items() if k != "index"}, {"name": name, "held": False})
        self.assertIsInstance(first["index"], int)
        self.assertGreaterEqual(first["index"], 1)

        # Each change happens while the query waits for it.
        leases: List[fence.Lease] = []
        t = later(0.1, lambda: leases.append(self.other.acquire(name, ttl=10, owner="ci:7 ./deploy.sh")))
        s, took = timed_next(w)
        joined(t)
        self.assertLess(took, 0.1 + PROMPT, "the acquire was seen after %.3fs" % (took - 0.1))
        self.assertEqual((s["held"], s["token"], s["owner"]), (True, leases[0].token, "ci:7 ./deploy.sh"))
        self.assertTrue(0 < s["expires_in_ms"] <= 10000, s)
        self.assertNotEqual(s["index"], first["index"])
        held_index = s["index"]

        # A renewal is no change: the next state is the release's.
        def renew_then_release() -> None:
            leases[0].renew()
            time.sleep(0.4)  # more than one of the server's 300ms waits
            leases[0].release()

        t = later(0.05, renew_then_release)
        s, took = timed_next(w)
        joined(t)
        self.assertEqual((s["held"], s.get("token"), s["last_token"]), (False, None, leases[0].token))
        self.assertNotEqual(s["index"], held_index)

        second = self.other.acquire(name, ttl=10)
        s, _ = timed_next(w)
        self.assertEqual((s["held"], s["token"]), (True, second.token))
        t = later(0.1, lambda: self.other.revoke(name))
        s, took = timed_next(w)
        joined(t)
        self.assertLess(took, 0.1 + PROMPT, "the revoke was seen after %.3fs" % (took - 0.1))
        self.assertEqual((s["held"], s["last_token"]), (False, second.token))

    def test_an_unchanged_lock_yields_nothing_while_the_servers_waits_pass(self) -> None:
        name = unique("quiet")
        w = self.client.watch(name, wait=0.1, stop=self.stop_event())
        self.addCleanup(w.close)
        first, _ = timed_next(w)
        leases: List[fence.Lease] = []
        t = later(1.0, lambda: leases.append(self.other.acquire(name, ttl=5)))
        s, took = timed_next(w)
        joined(t)
        # The first state after the first is the acquire's: the waits that passed
        # meanwhile (about ten of 100ms) yielded nothing.
        self.assertGreaterEqual(took, 0.95, "yielded %r after %.3fs, before the lock changed" % (s, took))
        self.assertEqual((s["held"], s["token"]), (True, leases[0].token))
        self.assertNotEqual(s["index"], first["index"])
        leases[0].release()

    def test_a_slow_consumer_gets_the_latest_state_not_the_ones_it_missed(self) -> None:
        name = unique("slow")
        w = self.client.watch(name, stop=self.stop_event())
        self.addCleanup(w.close)
        timed_next(w)
        # Changes while the consumer is busy: nothing is buffered for it.
        for _ in range(3):
            self.other.acquire(name, ttl=5).release()
        last = self.other.acquire(name, ttl=5)
        s, took = timed_next(w)
        self.assertLess(took, 1.0, "the latest state after %.3fs, want at once" % took)
        self.assertEqual((s["held"], s["token"]), (True, last.token))
        self.assertEqual(s["token"], self.client.status(name)["token"])
        last.release()

    def test_break_and_close_end_the_watch(self) -> None:
        name = unique("close")
        for state in self.client.watch(name):
            self.assertEqual(state["name"], name)
            break
        w = self.client.watch(name)
        next(w)
        w.close()
        with self.assertRaises(StopIteration):
            next(w)

    def test_stop_ends_the_watch_at_once_and_the_query_in_flight_with_it(self) -> None:
        srv = FenceServer()  # its own: the count of waiting queries is this test's alone
        self.addCleanup(srv.close)
        c = fence.Client(srv.url)
        name = unique("stop")
        stop = self.stop_event()
        w = c.watch(name, stop=stop)
        timed_next(w)
        stopped_at: List[float] = []

        def stop_when_waiting() -> None:
            if not until(lambda: in_flight(srv.url) == 1, PROMPT):
                raise AssertionError("the blocking query never reached the server")
            stopped_at.append(time.monotonic())
            stop.set()

        t = later(0, stop_when_waiting)
        with self.assertRaises(StopIteration):
            next(w)
        ended = time.monotonic()
        joined(t)
        self.assertLess(ended - stopped_at[0], 0.5, "the watch ended %.3fs after the stop" % (ended - stopped_at[0]))
        self.assertTrue(until(lambda: in_flight(srv.url) == 0, PROMPT), "the server still waits on the stopped query")

        # A stop set before the start ends the watch before any request: one to a
        # port nobody listens on would be told to on_unavailable.
        told: List[fence.UnavailableError] = []
        down = fence.Client("127.0.0.1:%d" % closed_port())
        self.assertEqual(list(down.watch(name, stop=stop, on_unavailable=told.append)), [])
        self.assertEqual(told, [])

    def test_bad_arguments_raise_invalid_error_at_once(self) -> None:
        for bad in ("", 7, "a\x00b", "x" * 256):
            with self.assertRaises(fence.InvalidError) as cm:
                self.client.watch(bad)  # type: ignore[arg-type]
            self.assertEqual(cm.exception.field, "name")
            self.assertTrue(str(cm.exception).startswith("watch: invalid name"), str(cm.exception))
            with self.assertRaises(fence.InvalidError) as cm:
                self.client.observe_leader(bad)  # type: ignore[arg-type]
            self.assertTrue(str(cm.exception).startswith("observe: invalid name"), str(cm.exception))
            with self.assertRaises(fence.InvalidError) as cm:
                self.client.leader(bad)  # type: ignore[arg-type]
            self.assertTrue(str(cm.exception).startswith("leader: invalid name"), str(cm.exception))
        for wait in (0, -1, float("nan"), float("inf"), "1", True):
            with self.assertRaises(fence.InvalidError) as cm:
                self.client.watch("w", wait=wait)  # type: ignore[arg-type]
            self.assertEqual(cm.exception.field, "wait", wait)
        with self.assertRaises(fence.InvalidError) as cm:
            self.client.watch("w", stop=True)  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "stop")
        with self.assertRaises(fence.InvalidError) as cm:
            self.client.watch("w", on_unavailable="log")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "on_unavailable")


class TestLeader(Base):
    def test_leader_reports_nobody_then_the_holder_of_the_elections_lock(self) -> None:
        name = unique("elect")
        self.assertEqual(self.client.leader(name), fence.Leader(name, False, "", 0, 0))
        term = self.other.acquire(name, ttl=10, owner="node-1")
        ld = self.client.leader(name)
        self.assertEqual((ld.name, ld.leading, ld.owner, ld.epoch), (name, True, "node-1", term.token))
        self.assertTrue(0 < ld.expires_in_ms <= 10000, ld)
        term.release()

    def test_observe_leader_yields_the_leader_at_once_then_each_new_term_and_vacancy(self) -> None:
        name = unique("observe")
        stop = self.stop_event()
        obs = self.client.observe_leader(name, stop=stop)
        self.addCleanup(obs.close)
        first, took = timed_next(obs)
        self.assertLess(took, 1.0, "first leader after %.3fs, want at once" % took)
        self.assertEqual(first, fence.Leader(name, False, "", 0, 0))

        terms: List[fence.Lease] = []
        t = later(0.1, lambda: terms.append(self.other.acquire(name, ttl=10, owner="node-a")))
        ld, took = timed_next(obs)
        joined(t)
        a = terms[0]
        self.assertLess(took, 0.1 + PROMPT, "the new term was seen after %.3fs" % (took - 0.1))
        self.assertEqual((ld.leading, ld.owner, ld.epoch), (True, "node-a", a.token))

        # Renewing is no change of leader; the end of the term is.
        def renew_then_release() -> None:
            a.renew()
            a.release()

        t = later(0.05, renew_then_release)
        ld, _ = timed_next(obs)
        joined(t)
        self.assertEqual(ld, fence.Leader(name, False, "", 0, 0))

        # A heal while nobody leads changes the lock (its index), not the leader: the
        # next leader yielded is the next term.
        def heal_then_elect() -> None:
            self.other.heal(name, a.token + 100)
            time.sleep(0.4)
            terms.append(self.other.acquire(name, ttl=10, owner="node-b"))

        t = later(0.05, heal_then_elect)
        ld, _ = timed_next(obs)
        joined(t)
        b = terms[1]
        self.assertEqual((ld.leading, ld.owner, ld.epoch), (True, "node-b", b.token))
        self.assertGreater(b.token, a.token + 100)

        # A slow observer gets the latest term next.
        b.release()
        c = self.other.acquire(name, ttl=10, owner="node-c")
        ld, _ = timed_next(obs)
        self.assertEqual((ld.owner, ld.epoch), ("node-c", c.token))

        # A stop ends it at once.
        t = later(0.1, stop.set)
        t0 = time.monotonic()
        with self.assertRaises(StopIteration):
            next(obs)
        joined(t)
        self.assertLess(time.monotonic() - t0, 0.1 + 0.5)
        c.release()


class TestRestart(unittest.TestCase):
    def test_a_server_restart_is_told_to_on_unavailable_and_the_watch_goes_on(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        c = fence.Client(srv.url)
        name = unique("restart")
        told: List[fence.UnavailableError] = []
        stop = threading.Event()
        dog = threading.Timer(WATCHDOG, stop.set)
        dog.start()
        self.addCleanup(dog.cancel)
        w = c.watch(name, stop=stop, on_unavailable=told.append)
        self.addCleanup(w.close)
        before, _ = timed_next(w)
        leases: List[fence.Lease] = []

        def restart_then_acquire() -> None:
            srv.stop()
            if not until(lambda: len(told) >= 2, 5):
                raise AssertionError("on_unavailable told %d times while the server was down" % len(told))
            srv.start()  # same port, same data
            leases.append(c.acquire(name, ttl=5))

        t = later(0.1, restart_then_acquire)
        s, _ = timed_next(w)
        joined(t)
        self.assertEqual((s["held"], s["token"]), (True, leases[0].token))
        self.assertNotEqual(s["index"], before["index"])
        self.assertTrue(all(isinstance(e, fence.UnavailableError) for e in told), told)
        self.assertTrue(str(told[-1]).startswith("cannot reach the fence server at %s: " % srv.url), str(told[-1]))
        leases[0].release()

        # Raising from on_unavailable ends the watch with that error.
        srv.stop()

        def give_up(e: fence.UnavailableError) -> None:
            raise RuntimeError("give up")

        with self.assertRaisesRegex(RuntimeError, "^give up$"):
            next(c.watch(name, on_unavailable=give_up))


class _OlderServer(http.server.BaseHTTPRequestHandler):
    """A stand-in for a fence serve from before blocking queries: it ignores index
    and wait_ms and answers the state at once, with no Fence-Index."""

    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.split("/")[3])
        answer(self, 200, {"Content-Type": "application/json"}, json.dumps({"name": name, "held": False}).encode())

    def log_message(self, *args: Any) -> None:
        pass


class TestOlderServer(unittest.TestCase):
    def test_an_answer_without_fence_index_ends_the_watch_with_not_supported(self) -> None:
        url = serve_stand_in(self, _OlderServer)
        c = fence.Client(url)
        _OlderServer.requests = 0

        with self.assertRaises(fence.NotSupportedError) as cm:
            next(c.watch("deploy"))
        self.assertEqual(cm.exception.code, "not_implemented")
        self.assertEqual(
            str(cm.exception),
            'watch "deploy": the fence server at %s does not answer blocking queries (no Fence-Index header): '
            "it is older than this client" % url,
        )
        with self.assertRaises(fence.NotSupportedError):
            next(c.observe_leader("deploy"))
        self.assertEqual(_OlderServer.requests, 2, "asked again after the first answer (a busy loop on an older server)")
        self.assertFalse(c.leader("deploy").leading)  # inspecting still works there


if __name__ == "__main__":
    unittest.main()
