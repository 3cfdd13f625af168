"""Tests of semaphores (limit) and shared locks (shared) against a real `fence serve`:
slots, holders, the limit every acquirer shares, and fencing per slot."""

from __future__ import annotations

import os
import sys
import threading
import unittest
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402

from fenceserver import FenceServer, cleanup_bin, unique  # noqa: E402

server: Optional[FenceServer] = None
def setUpModule() -> None:
    # This tree's own fence serve, with semaphores and shared locks on its
    # embedded store: a test that cannot use them fails.
    global server
    server = FenceServer("--max-wait", "300ms")


def tearDownModule() -> None:
    if server is not None:
        server.close()
    cleanup_bin()


class Base(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.client = fence.Client(server.url)

    def release_all(self, leases: List[fence.Lease]) -> None:
        for lease in leases:
            lease.release()


class TestSemaphore(Base):
    def test_two_permits_get_distinct_slots_a_third_is_held_and_status_lists_the_holders(self) -> None:
        c, name = self.client, unique("sem")
        a = c.acquire(name, ttl=10, limit=2, owner="a")
        b = c.acquire(name, ttl=10, limit=2, owner="b")
        self.addCleanup(self.release_all, [a, b])
        self.assertEqual(sorted([a.slot, b.slot]), [0, 1])
        self.assertGreater(b.token, a.token)
        with self.assertRaises(fence.HeldError) as cm:
            c.acquire(name, ttl=1, limit=2)
        self.assertIsNotNone(cm.exception.expires_in_ms)
        self.assertTrue(0 < (cm.exception.expires_in_ms or 0) <= 10000, cm.exception.expires_in_ms)

        st = c.status(name)
        self.assertEqual((st["held"], st.get("limit"), st.get("shared", False), st["token"]), (True, 2, False, b.token))
        by_slot = sorted([a, b], key=lambda lease: lease.slot)
        self.assertEqual(
            [(h["slot"], h["token"], h.get("owner")) for h in st["holders"]],
            [(lease.slot, lease.token, "a" if lease is a else "b") for lease in by_slot],
        )
        for h in st["holders"]:
            self.assertTrue(0 < h["expires_in_ms"] <= 10000, h)

        a.release()
        again = c.acquire(name, ttl=10, limit=2)
        self.addCleanup(again.release)
        self.assertEqual(again.slot, a.slot, "the released slot is granted again")
        self.assertGreater(again.token, b.token)

    def test_a_waiter_is_woken_by_a_release_and_gets_the_freed_slot(self) -> None:
        c, name = self.client, unique("semwait")
        held = [c.acquire(name, ttl=30, limit=2), c.acquire(name, ttl=30, limit=2)]
        self.addCleanup(held[0].release)
        got: List[fence.Lease] = []
        errors: List[BaseException] = []

        def wait() -> None:
            try:
                got.append(fence.Client(self.client.server).acquire(name, ttl=10, wait=20, limit=2))
            except BaseException as e:  # noqa: B036 - reported below
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        held[1].release()
        t.join(30)
        self.assertFalse(t.is_alive(), "the waiter was not granted within 30s")
        self.assertEqual(errors, [])
        self.addCleanup(got[0].release)
        self.assertEqual(got[0].slot, held[1].slot)
        self.assertGreater(got[0].token, held[1].token)

    def test_lock_context_takes_a_permit(self) -> None:
        name = unique("semlock")
        with self.client.lock(name, ttl=5, limit=3) as permit:
            self.assertEqual(permit.slot, 0)
            self.assertEqual(self.client.status(name).get("limit"), 3)
        self.assertFalse(self.client.status(name)["held"])

    def test_another_limit_while_permits_are_live_raises_limit_mismatch_naming_both(self) -> None:
        c, name = self.client, unique("semlimit")
        a = c.acquire(name, ttl=10, limit=3)
        for limit, want in ((2, 2), (None, 1)):
            with self.subTest(limit=limit):
                with self.assertRaises(fence.LimitMismatchError) as cm:
                    c.acquire(name, ttl=1, limit=limit)
                e = cm.exception
                self.assertIsInstance(e, fence.InvalidError)
                self.assertEqual((e.code, e.status, e.name, e.limit, e.held_limit), ("limit_mismatch", 409, name, want, 3))
        a.release()
        other = c.acquire(name, ttl=1, limit=2)  # no live lease: any limit
        self.assertGreater(other.token, a.token)
        other.release()

    def test_a_stale_permits_write_to_its_slots_key_is_refused_once_the_next_holder_wrote(self) -> None:
        c, name = self.client, unique("semfence")
        # a holds slot 0 for a short TTL and does not renew (a paused holder); k keeps slot 1.
        a = c.acquire(name, ttl=0.3, limit=2)
        k = c.acquire(name, ttl=30, limit=2)
        self.addCleanup(k.release)

        def key(lease: fence.Lease) -> str:
            return "%s-partition-%d" % (name, lease.slot)

        c.put(key(a), b"a's batch", lease=a)
        b = c.acquire(name, ttl=30, wait=20, limit=2)  # a's slot, once a expired
        self.addCleanup(b.release)
        self.assertEqual(b.slot, a.slot)
        c.put(key(b), b"b's batch", lease=b)
        with self.assertRaises(fence.StaleTokenError) as cm:
            c.put(key(a), b"a's late batch", lease=a)
        self.assertEqual((cm.exception.token, cm.exception.highest), (a.token, b.token))
        self.assertEqual(c.get(key(b)).value, b"b's batch")
        # k's lower token is still good for its own slot's key: each key keeps its own highest.
        self.assertLess(k.token, b.token)
        c.put(key(k), b"k's batch", lease=k)


class TestShared(Base):
    def test_shared_leases_hold_together_and_an_exclusive_acquire_waits_for_them(self) -> None:
        c, name = self.client, unique("rw")
        r1 = c.acquire(name, ttl=10, shared=True, owner="r1")
        r2 = c.acquire(name, ttl=10, shared=True, owner="r2")
        self.assertEqual((r1.slot, r2.slot), (0, 0))
        self.assertGreater(r2.token, r1.token)
        st = c.status(name)
        self.assertEqual((st["held"], st.get("shared"), st.get("limit", 0)), (True, True, 0))
        self.assertEqual([(h["token"], h.get("owner")) for h in st["holders"]], [(r1.token, "r1"), (r2.token, "r2")])
        with self.assertRaises(fence.HeldError):
            c.acquire(name, ttl=1)
        r1.release()
        r2.release()
        w = c.acquire(name, ttl=10, wait=20)
        self.addCleanup(w.release)
        self.assertGreater(w.token, r2.token)
        self.assertNotIn("holders", c.status(name))


class TestBadKind(Base):
    def test_bad_limit_or_shared_raises_invalid_error_before_any_request(self) -> None:
        # Nothing listens on port 9: a request would raise UnavailableError.
        c = fence.Client("http://127.0.0.1:9")
        cases = [
            ("limit 0", dict(limit=0), "limit", 'acquire "job": invalid limit "0": must be an integer between 1 and 1024'),
            ("limit 1025", dict(limit=1025), "limit", None),
            ("limit float", dict(limit=2.5), "limit", None),
            ("limit str", dict(limit="3"), "limit", None),
            ("limit bool", dict(limit=True), "limit", None),
            ("shared not a bool", dict(shared="yes"), "shared", None),
            ("shared and limit", dict(shared=True, limit=3), "shared", None),
        ]
        for label, kw, field, message in cases:
            with self.subTest(label):
                with self.assertRaises(fence.InvalidError) as cm:
                    c.acquire("job", **kw)  # type: ignore[arg-type]
                self.assertEqual((cm.exception.field, cm.exception.code, cm.exception.status), (field, "invalid", None))
                if message is not None:
                    self.assertEqual(str(cm.exception), message)

    def test_limit_1_is_a_lock_that_any_server_grants_with_slot_0(self) -> None:
        name = unique("limit1")
        lease = self.client.acquire(name, ttl=5, limit=1, shared=False)
        self.addCleanup(lease.release)
        self.assertEqual(lease.slot, 0)
        st = self.client.status(name)
        self.assertEqual((st["held"], st.get("limit"), st.get("holders")), (True, None, None))


if __name__ == "__main__":
    unittest.main()
