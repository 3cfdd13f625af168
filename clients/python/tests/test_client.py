"""Tests of the fence Python client against a real `fence serve`."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import fence  # noqa: E402
import fence._client  # noqa: E402

from fenceserver import FenceServer, answer, cleanup_bin, serve_stand_in, unique  # noqa: E402

# The shared server caps one long poll at 300ms, so every wait longer than that is
# several polls: the tests of waiting exercise the client's poll loop.
SERVER_MAX_WAIT = 0.3
server: Optional[FenceServer] = None


def setUpModule() -> None:
    global server
    server = FenceServer("--max-wait", "%dms" % int(SERVER_MAX_WAIT * 1000))


def tearDownModule() -> None:
    if server is not None:
        server.close()
    cleanup_bin()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Base(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.server = server
        self.client = fence.Client(server.url)
        self.other = fence.Client(server.url)

    def assert_free(self, name: str) -> None:
        """Asserts that name can be acquired at once (and releases it)."""
        lease = self.other.acquire(name, ttl=5)
        lease.release()

    def release_elsewhere(self, lease: fence.Lease) -> None:
        """Releases lease through the other client, as someone else holding its id
        (a credential) would."""
        name = lease.name
        self.other._post_json("release", name, "/v1/locks/%s/release" % fence.escape_name(name), {"lease": lease.id})

    def assert_refused_not_held(self, op: str, call: Callable[[], None], lease: fence.Lease) -> fence.NotHeldError:
        """Asserts that call raises the server's 410 NotHeldError for op on lease
        and sets lease.lost; returns the error."""
        with self.assertRaises(fence.NotHeldError) as cm:
            call()
        self.assertEqual(cm.exception.status, 410)
        self.assertEqual(
            str(cm.exception), '%s "%s": lease not held (expired, released, or never granted)' % (op, lease.name)
        )
        self.assertTrue(lease.lost.is_set())
        return cm.exception


class TestAcquireRelease(Base):
    def test_acquire_then_release_frees_the_lock_and_the_next_token_is_higher(self) -> None:
        name = unique("ar")
        lease = self.client.acquire(name, ttl=10)
        self.assertEqual(lease.name, name)
        self.assertGreaterEqual(lease.token, 1)
        self.assertEqual(len(lease.id), 32)
        self.assertTrue(lease.held)
        self.assertFalse(lease.lost.is_set())
        self.assertEqual(
            lease.headers(), {"Fence-Token": str(lease.token), "Fence-Lock": name, "Fence-Lease": lease.id}
        )
        self.assertNotIn(lease.id, repr(lease))
        st = self.client.status(name)
        self.assertTrue(st["held"], st)
        self.assertEqual(st["token"], lease.token)
        lease.release()
        self.assertTrue(lease.released)
        self.assertFalse(lease.held)
        self.assertFalse(lease.lost.is_set(), "a release is not a loss")
        lease.release()  # again: nothing to do
        self.assertFalse(self.client.status(name)["held"])
        nxt = self.other.acquire(name, ttl=10)
        self.assertGreater(nxt.token, lease.token)
        nxt.release()

    def test_local_deadline_is_not_later_than_the_servers(self) -> None:
        name = unique("deadline")
        before = time.monotonic()
        lease = self.client.acquire(name, ttl=10)
        after = time.monotonic()
        self.assertGreaterEqual(lease.deadline, before + 10 - 1e-6)
        self.assertLessEqual(lease.deadline, after + 10)
        self.assertLessEqual(lease.expires_in, 10)
        lease.release()

    def test_names_with_slashes_dots_and_unicode_round_trip(self) -> None:
        for name in ("jobs/%s/nightly" % uuid.uuid4().hex[:6], "..", "a/../b-" + uuid.uuid4().hex[:6], "ü-" + uuid.uuid4().hex[:6]):
            with self.subTest(name=name):
                lease = self.client.acquire(name, ttl=5)
                self.assertEqual(self.client.status(name)["name"], name)
                key = "k/" + name
                self.client.put(key, b"v", lease=lease)
                item = self.client.get(key)
                self.assertEqual((item.value, item.token, item.lock), (b"v", lease.token, name))
                lease.release()

    def test_release_of_a_lease_released_by_someone_else_raises_not_held_and_sets_lost(self) -> None:
        name = unique("relother")
        lease = self.client.acquire(name, ttl=10)
        self.release_elsewhere(lease)
        self.assert_refused_not_held("release", lease.release, lease)


class TestHeld(Base):
    def test_held_lock_raises_held_error_with_expires_in_ms(self) -> None:
        name = unique("held")
        lease = self.client.acquire(name, ttl=20)
        try:
            with self.assertRaises(fence.HeldError) as cm:
                self.other.acquire(name, ttl=5)
            e = cm.exception
            self.assertEqual((e.status, e.code, e.name), (409, "held", name))
            self.assertIsNotNone(e.expires_in_ms)
            assert e.expires_in_ms is not None
            self.assertTrue(0 < e.expires_in_ms <= 20000, e.expires_in_ms)
            self.assertRegex(str(e), r'^lock "%s" is held \(expires in \d+(\.\d)?s\)$' % name)
            self.assertIsInstance(e, fence.FenceError)
        finally:
            lease.release()

    def test_wait_longer_than_the_servers_cap_polls_until_the_wait_is_over(self) -> None:
        name = unique("heldwait")
        lease = self.client.acquire(name, ttl=30)
        try:
            start = time.monotonic()
            with self.assertRaises(fence.HeldError) as cm:
                self.other.acquire(name, ttl=5, wait=1.2)
            waited = time.monotonic() - start
            # The server answers each poll after 0.3s: ending before 1.2s would mean
            # the client gave up after one poll.
            self.assertGreaterEqual(waited, 1.2)
            self.assertLess(waited, 10)
            self.assertIsNotNone(cm.exception.expires_in_ms)
        finally:
            lease.release()


class TestWait(Base):
    def test_waiter_is_woken_by_the_release(self) -> None:
        name = unique("wake")
        lease = self.client.acquire(name, ttl=30)
        got: List[Any] = []

        def waiter() -> None:
            try:
                got.append(self.other.acquire(name, ttl=10, wait=20))
            except Exception as e:  # reported below
                got.append(e)

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        time.sleep(1.0)  # past the server's poll cap: the waiter is on a later poll
        self.assertEqual(got, [], "granted while the lock was held")
        released = time.monotonic()
        lease.release()
        t.join(15)
        self.assertFalse(t.is_alive(), "waiter not woken")
        self.assertIsInstance(got[0], fence.Lease, got)
        woken = got[0]
        # Woken by the release, long before the 30s TTL would have freed the lock.
        self.assertLess(time.monotonic() - released, 10)
        self.assertGreater(woken.token, lease.token)
        # Dated from when the granting poll was sent plus waited_ms, not from the
        # first poll: the waiter gets (nearly) its whole TTL after the release.
        self.assertGreater(woken.deadline, released + 10 - SERVER_MAX_WAIT - 0.05)
        self.assertLessEqual(woken.deadline, time.monotonic() + 10)
        woken.release()

    def test_wait_forever_is_woken_by_the_release(self) -> None:
        name = unique("forever")
        lease = self.client.acquire(name, ttl=30)
        got: List[Any] = []
        t = threading.Thread(target=lambda: got.append(self.other.acquire(name, ttl=5, wait=fence.FOREVER)), daemon=True)
        t.start()
        time.sleep(0.7)
        lease.release()
        t.join(15)
        self.assertFalse(t.is_alive())
        self.assertGreater(got[0].token, lease.token)
        got[0].release()


class TestRenew(Base):
    def test_renew_extends_the_lease(self) -> None:
        name = unique("renew")
        lease = self.client.acquire(name, ttl=1)
        old = lease.deadline
        lease.renew(ttl=3)
        self.assertEqual(lease.ttl, 3)
        self.assertGreater(lease.deadline, old + 1.5)
        time.sleep(1.3)  # past the first TTL
        with self.assertRaises(fence.HeldError):
            self.other.acquire(name, ttl=1)
        self.assertFalse(lease.lost.is_set())
        lease.release()

    def test_renew_after_the_server_expired_the_lease_raises_not_held_and_sets_lost(self) -> None:
        name = unique("renewlate")
        lease = self.client.acquire(name, ttl=0.3)
        self.assertTrue(lease.lost.wait(5), "lost not set at the deadline")
        time.sleep(0.2)
        with self.assertRaises(fence.NotHeldError) as cm:
            lease.renew()
        self.assertEqual(str(cm.exception), 'renew "%s": lease expired before it was renewed' % name)
        self.assertIn("expired before it was renewed", str(lease.lost_reason))

    def test_renew_refused_by_the_server_sets_lost(self) -> None:
        name = unique("renewrefused")
        lease = self.client.acquire(name, ttl=10)
        self.release_elsewhere(lease)
        err = self.assert_refused_not_held("renew", lease.renew, lease)
        self.assertIs(lease.lost_reason, err)
        with self.assertRaises(fence.NotHeldError):
            lease.renew()


class TestLock(Base):
    def test_lock_renews_past_its_ttl_and_releases_on_exit(self) -> None:
        name = unique("ctx")
        with self.client.lock(name, ttl=0.6, wait=5) as lease:
            time.sleep(1.5)  # 2.5 TTLs: held only because it renews
            with self.assertRaises(fence.HeldError):
                self.other.acquire(name, ttl=1)
            self.assertFalse(lease.lost.is_set(), lease.lost_reason)
            self.assertTrue(lease.held)
        self.assertTrue(lease.released)
        self.assertFalse(lease.lost.is_set())
        self.assert_free(name)

    def test_lock_releases_when_the_block_raises(self) -> None:
        name = unique("ctxraise")
        with self.assertRaises(ZeroDivisionError):
            with self.client.lock(name, ttl=30) as lease:
                1 / 0
        self.assertTrue(lease.released)
        self.assert_free(name)

    def test_lock_that_cannot_be_acquired_raises_held_on_entry(self) -> None:
        name = unique("ctxheld")
        holder = self.client.acquire(name, ttl=30)
        ran = []
        with self.assertRaises(fence.HeldError):
            with self.other.lock(name, ttl=5, wait=0.5):
                ran.append(1)
        self.assertEqual(ran, [])
        holder.release()

    def test_lease_released_by_another_client_is_lost_at_the_next_renewal(self) -> None:
        name = unique("stolen")
        with self.client.lock(name, ttl=0.9) as lease:
            # Someone with the lease id (a credential) releases it; the renewal at
            # ttl/3 is then refused.
            self.release_elsewhere(lease)
            self.assertTrue(lease.lost.wait(5), "lost not set after a refused renewal")
            self.assertIsInstance(lease.lost_reason, fence.NotHeldError)
            assert lease.lost_reason is not None
            self.assertEqual(lease.lost_reason.status, 410)
        # The exit's release finds it gone, which is no error.
        self.assertTrue(lease.released)

    def test_module_level_lock_uses_the_default_client(self) -> None:
        name = unique("modlock")
        with mock.patch.dict(os.environ, {"FENCE_SERVER": self.server.url.replace("http://", "")}):
            with mock.patch.object(fence._client, "_default", None):
                with fence.lock(name, ttl=5) as lease:
                    self.assertEqual(fence.default_client().server, self.server.url)
                    with self.assertRaises(fence.HeldError):
                        self.other.acquire(name, ttl=1)
                self.assertTrue(lease.released)
        self.assert_free(name)

    def test_lock_context_cannot_be_entered_twice(self) -> None:
        ctx = self.client.lock(unique("twice"), ttl=5)
        with ctx:
            with self.assertRaises(fence.InvalidError):
                with ctx:
                    pass


class TestKV(Base):
    def test_put_and_get(self) -> None:
        name, key = unique("kvlock"), unique("kv")
        with self.client.lock(name, ttl=10) as lease:
            self.client.put(key, "balance=100", lease=lease)
            item = self.client.get(key)
            self.assertEqual(item, fence.Item(value=b"balance=100", token=lease.token, lock=name))
            self.assertEqual(item.text, "balance=100")
            self.client.put(key, b"\x00\xffbin", lock=name, token=lease.token, lease_id=lease.id)
            self.assertEqual(self.client.get(key).value, b"\x00\xffbin")
            self.client.put(key, b"", lease=lease)
            self.assertEqual(self.client.get(key).value, b"")

    def test_get_of_an_unwritten_key_raises_not_found(self) -> None:
        key = unique("nokey")
        with self.assertRaises(fence.NotFoundError) as cm:
            self.client.get(key)
        self.assertEqual((cm.exception.status, str(cm.exception)), (404, 'get "%s": not found' % key))

    def test_put_without_a_lock_is_invalid(self) -> None:
        with self.assertRaises(fence.InvalidError) as cm:
            self.client.put("k", b"v", token=3)
        self.assertEqual(cm.exception.field, "Fence-Lock")
        self.assertTrue(str(cm.exception).startswith('put "k": invalid Fence-Lock: is required'), str(cm.exception))

    def test_put_with_another_locks_token_raises_wrong_lock(self) -> None:
        a, b, key = unique("wla"), unique("wlb"), unique("wlkey")
        la = self.client.acquire(a, ttl=10)
        lb = self.other.acquire(b, ttl=10)
        self.client.put(key, b"a", lease=la)
        with self.assertRaises(fence.WrongLockError) as cm:
            self.other.put(key, b"b", lease=lb)
        e = cm.exception
        self.assertEqual((e.lock, e.got, e.key), (a, b, key))
        self.assertEqual(str(e), 'put "%s": token of lock "%s", but the key is fenced by lock "%s"' % (key, b, a))
        self.assertEqual(self.client.get(key).value, b"a")
        la.release()
        lb.release()

    def test_fence_advances_the_key_so_an_older_holder_is_refused(self) -> None:
        name, key = unique("fencelock"), unique("fencekey")
        old = self.client.acquire(name, ttl=0.3)
        self.client.put(key, b"old", lease=old)
        new = self.other.acquire(name, ttl=10, wait=10)
        self.other.fence(key, new)
        with self.assertRaises(fence.StaleTokenError) as cm:
            self.client.put(key, b"zombie", lease=old)
        self.assertEqual((cm.exception.highest, cm.exception.token), (new.token, old.token))
        # The value is the old one; the key's token is the fence's, which refused A.
        self.assertEqual(self.client.get(key), fence.Item(b"old", new.token, name))
        new.release()


    def test_a_lease_sends_its_lease_id_so_its_token_is_admitted_again(self) -> None:
        name, key = unique("againlock"), unique("again")
        with self.client.lock(name, ttl=10) as lease:
            self.client.put(key, b"first", lease=lease)
            self.client.put(key, b"second", lease=lease)  # the same token: admitted only with Fence-Lease
            self.client.fence(key, lease=lease)
            # Without the lease, the live lease's token is refused (P9): anyone can read it.
            with self.assertRaises(fence.LeaseRequiredError) as cm:
                self.client.put(key, b"third", lock=name, token=lease.token)
            e = cm.exception
            self.assertEqual((e.status, e.code, e.lock, e.token, e.key), (409, "lease_required", name, lease.token, key))
            self.assertEqual(str(e), 'put %s: token %d of lock %s belongs to a live lease: the write must carry its lease id (Fence-Lease)'
                             % (fence._errors.quote(key), lease.token, fence._errors.quote(name)))
            fresh = unique("againfresh")
            with self.assertRaises(fence.LeaseRequiredError):
                self.client.fence(fresh, lock=name, token=lease.token)
            self.assertEqual(self.client.get(key).value, b"second")
        # Once the lease has ended, the token alone is admitted as any token is:
        # stale where its lease wrote, written on a new key.
        with self.assertRaises(fence.StaleTokenError) as cm:
            self.client.put(key, b"third", lock=name, token=lease.token)
        self.assertTrue(cm.exception.same_token)
        self.client.put(fresh, b"token only", lock=name, token=lease.token)
        self.assertEqual(self.client.get(fresh).value, b"token only")

    def test_delete_keeps_the_fence_and_purge_removes_it(self) -> None:
        name, key = unique("dellock"), unique("delkey")
        old = self.client.acquire(name, ttl=10)
        self.client.put(key, b"v1", lease=old)
        old.release()
        new = self.client.acquire(name, ttl=10)
        self.client.delete(key, lease=new)
        self.assertEqual(self.client.get(key), fence.Item(value=None, token=new.token, lock=name))
        self.assertEqual(self.client.get(key).text, "")
        with self.assertRaises(fence.StaleTokenError) as cm:  # the fence stayed
            self.client.put(key, b"late", lock=name, token=old.token)
        self.assertEqual((cm.exception.highest, cm.exception.token), (new.token, old.token))
        with self.assertRaises(fence.NotFoundError):
            self.client.delete(key, lease=new)  # already deleted
        with self.assertRaises(fence.NotFoundError):
            self.client.delete(unique("never"), lease=new)
        new.release()

        self.client.purge(key)
        with self.assertRaises(fence.NotFoundError):
            self.client.get(key)
        with self.assertRaises(fence.NotFoundError):
            self.client.purge(key)
        with self.client.lock(unique("dellock2"), ttl=10) as other:  # any lock may write it now
            self.client.put(key, b"v2", lease=other)
        self.assertEqual(self.client.get(key).value, b"v2")

    def test_a_token_never_issued_raises_unissued_token(self) -> None:
        name, key = unique("unissuedlock"), unique("unissued")
        with self.client.lock(name, ttl=10) as lease:
            self.client.put(key, b"real", lease=lease)
            with self.assertRaises(fence.UnissuedTokenError) as cm:
                self.client.put(key, b"typo", lock=name, token=lease.token + 1000)
            e = cm.exception
            self.assertEqual((e.status, e.code, e.lock, e.token, e.last, e.other_lease), (409, "unissued_token", name, lease.token + 1000, lease.token, False))
            never = unique("never-granted")
            with self.assertRaises(fence.UnissuedTokenError) as cm:
                self.client.fence(unique("unissued2"), lock=never, token=1)
            self.assertEqual((cm.exception.lock, cm.exception.last), (never, 0))
            with self.assertRaises(fence.UnissuedTokenError) as cm:
                self.client.put(key, b"forged", lock=name, token=lease.token, lease_id="0123456789abcdef0123456789abcdef")
            self.assertTrue(cm.exception.other_lease)
            self.assertEqual(self.client.get(key).value, b"real", "nothing was written")

    def test_unissued_token_answer_is_a_typed_error(self) -> None:
        body = {"error": 'put "k": token 999 of lock "nightly" was never issued', "code": "unissued_token",
                "key": "k", "lock": "nightly", "token": 999, "last": 9}
        e = fence._errors.error_from_answer(409, body)
        self.assertIsInstance(e, fence.UnissuedTokenError)
        self.assertEqual((e.key, e.lock, e.token, e.last, e.other_lease, str(e)), ("k", "nightly", 999, 9, False, body["error"]))
        o = fence._errors.error_from_answer(409, {"error": "x", "code": "unissued_token", "lock": "l", "token": 3, "last": 5, "other_lease": True})
        self.assertTrue(o.other_lease)

    def test_lease_required_answer_is_a_typed_error(self) -> None:
        body = {"error": 'put "k": token 7 of lock "nightly" belongs to a live lease: the write must carry its lease id (Fence-Lease)',
                "code": "lease_required", "key": "k", "lock": "nightly", "token": 7}
        e = fence._errors.error_from_answer(409, body)
        self.assertIsInstance(e, fence.LeaseRequiredError)
        self.assertEqual((e.status, e.key, e.lock, e.token, str(e)), (409, "k", "nightly", 7, body["error"]))


class TestList(Base):
    def test_list_shows_held_locks_and_all_the_free_ones_too(self) -> None:
        prefix = unique("listed")
        held = self.client.acquire(prefix + "/held", ttl=10, owner="lister")
        freed = self.client.acquire(prefix + "/free", ttl=10)
        freed.release()
        every = self.client.list(prefix, all=True)
        self.assertEqual([(s["name"], s["held"], s.get("last_token")) for s in every],
                         [(prefix + "/free", False, freed.token), (prefix + "/held", True, held.token)])
        self.assertEqual(every[1]["owner"], "lister")
        self.assertEqual(len(self.client.list(prefix, limit=1, all=True)), 1)
        self.assertEqual([s["name"] for s in self.client.list(prefix)], [prefix + "/held"], "held only by default")
        held.release()

    def test_bad_arguments_are_refused_before_any_request(self) -> None:
        for kw, field in [({"prefix": ""}, "prefix"), ({"limit": -1}, "limit"), ({"limit": 10001}, "limit"),
                          ({"limit": True}, "limit"), ({"all": "yes"}, "all")]:
            with self.assertRaises(fence.InvalidError, msg=str(kw)) as cm:
                self.client.list(**kw)  # type: ignore[arg-type]
            self.assertEqual((cm.exception.field, cm.exception.status), (field, None), kw)


class TestSeedRace(Base):
    def test_paused_holder_wakes_past_its_ttl_and_its_write_is_refused(self) -> None:
        """The seed's race: A takes the lock, pauses past its TTL (no renewal), B
        takes it with a higher token and writes; A wakes and writes with its old
        token: refused, and B's value stays."""
        name, key = unique("seed"), unique("ledger")
        a = fence.Client(self.server.url)
        b = fence.Client(self.server.url)

        lease_a = a.acquire(name, ttl=0.5)
        a.put(key, b"balance=100 (A)", lease=lease_a)

        # A pauses (a GC, a stalled VM): no renewal. Its lease expires at the server,
        # and B, waiting, gets the lock.
        lease_b = b.acquire(name, ttl=10, wait=10)
        self.assertGreater(lease_b.token, lease_a.token)
        b.put(key, b"balance=120 (B)", lease=lease_b)

        # A wakes, still believing it holds the lock, and writes with its old token.
        self.assertTrue(lease_a.lost.is_set(), "A's lost event is not set after its deadline")
        with self.assertRaises(fence.StaleTokenError) as cm:
            a.put(key, b"balance=90 (A, stale)", lease=lease_a)
        e = cm.exception
        self.assertEqual((e.status, e.code), (409, "stale_token"))
        self.assertEqual(e.highest, lease_b.token)
        self.assertEqual(e.token, lease_a.token)
        self.assertEqual(e.key, key)
        self.assertEqual(str(e), 'put "%s": stale token %d, highest seen %d' % (key, lease_a.token, lease_b.token))

        item = b.get(key)
        self.assertEqual(item, fence.Item(value=b"balance=120 (B)", token=lease_b.token, lock=name))
        lease_b.release()


class TestBadInput(Base):
    def test_bad_arguments_raise_invalid_error(self) -> None:
        c = self.client
        cases = [
            ("empty name", lambda: c.acquire(""), "name", "acquire: invalid name: is empty"),
            ("ttl 0", lambda: c.acquire("x", ttl=0), "ttl", 'acquire "x": invalid ttl "0": must be between 0.001 and 86400 seconds'),
            ("ttl negative", lambda: c.acquire("x", ttl=-1), "ttl", None),
            ("ttl too long", lambda: c.acquire("x", ttl=86401), "ttl", None),
            ("ttl not a number", lambda: c.acquire("x", ttl="30"), "ttl", None),  # type: ignore[arg-type]
            ("ttl NaN", lambda: c.acquire("x", ttl=float("nan")), "ttl", None),
            ("ttl below a millisecond", lambda: c.acquire("x", ttl=0.0015), "ttl", None),
            ("wait negative", lambda: c.acquire("x", wait=-1), "wait", None),
            ("name not a string", lambda: c.acquire(7), "name", None),  # type: ignore[arg-type]
            ("name too long", lambda: c.acquire("n" * 256), "name", None),
            ("control character", lambda: c.acquire("a\nb"), "name", None),
            ("empty key", lambda: c.get(""), "key", "get: invalid key: is empty"),
            ("token 0", lambda: c.put("k", b"v", lock="l", token=0), "Fence-Token", None),
            ("token bool", lambda: c.put("k", b"v", lock="l", token=True), "Fence-Token", None),
            ("value int", lambda: c.put("k", 5, lock="l", token=1), "value", None),  # type: ignore[arg-type]
            ("lease and lock", lambda: c.put("k", b"v", lease=c.acquire(unique("both"), ttl=1), lock="l"), "lease", None),
            ("heal seen 0", lambda: c.heal("x", 0), "seen", None),
            ("empty lease id", lambda: c.put("k", b"v", lock="l", token=1, lease_id=""), "Fence-Lease", None),
        ]
        for label, call, field, message in cases:
            with self.subTest(label):
                with self.assertRaises(fence.InvalidError) as cm:
                    call()
                self.assertEqual(cm.exception.field, field)
                self.assertEqual(cm.exception.code, "invalid")
                self.assertIsNone(cm.exception.status)
                if message is not None:
                    self.assertEqual(str(cm.exception), message)

    def test_renew_with_a_bad_ttl_is_invalid_and_keeps_the_lease(self) -> None:
        lease = self.client.acquire(unique("badrenew"), ttl=5)
        with self.assertRaises(fence.InvalidError):
            lease.renew(ttl=0)
        self.assertTrue(lease.held)
        lease.release()

    def test_bad_server_urls_are_invalid(self) -> None:
        for bad in ("ftp://h:1", "http://", "http://h:1?x=1", "http://u:p@h:1", "h:notaport", "http://h:1#f"):
            with self.subTest(bad):
                with self.assertRaises(fence.InvalidError) as cm:
                    fence.Client(bad)
                self.assertEqual(cm.exception.field, "server")
        with mock.patch.dict(os.environ, {"FENCE_SERVER": "ftp://x"}):
            with self.assertRaises(fence.InvalidError) as cm:
                fence.Client()
            self.assertIn("FENCE_SERVER", str(cm.exception))


class TestServerURL(Base):
    def test_bare_host_port_and_env(self) -> None:
        bare = self.server.url.replace("http://", "")
        self.assertEqual(fence.Client(bare).server, self.server.url)
        with mock.patch.dict(os.environ, {"FENCE_SERVER": bare}):
            c = fence.Client()
        self.assertEqual(c.server, self.server.url)
        lease = c.acquire(unique("env"), ttl=5)
        lease.release()
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(fence.Client().server, "http://127.0.0.1:7420")

    def test_unreachable_server_raises_unavailable_naming_it(self) -> None:
        url = "http://127.0.0.1:%d" % free_port()
        c = fence.Client(url)
        with self.assertRaises(fence.UnavailableError) as cm:
            c.acquire("x", ttl=5)
        self.assertEqual(str(cm.exception), "cannot reach the fence server at %s: connection refused" % url)
        self.assertIsNone(cm.exception.status)
        with self.assertRaises(fence.UnavailableError):
            c.get("k")

    def test_waiting_acquire_retries_an_unreachable_server_until_the_wait_is_over(self) -> None:
        c = fence.Client("http://127.0.0.1:%d" % free_port())
        start = time.monotonic()
        with self.assertRaises(fence.UnavailableError):
            c.acquire("x", ttl=5, wait=0.6)
        waited = time.monotonic() - start
        self.assertGreaterEqual(waited, 0.6)
        self.assertLess(waited, 5)


class _Foreign(http.server.BaseHTTPRequestHandler):
    """Answers as a proxy or another server would: pages that are not fence's JSON."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answers: Dict[str, Tuple[int, Dict[str, str], bytes]] = {
            "/v1/locks/gateway/acquire": (502, {}, b"<html>Bad Gateway</html>"),
            "/v1/locks/redirect/acquire": (307, {"Location": "/v1/locks/other/acquire"}, b""),
        }
        answer(self, *answers.get(self.path, (404, {}, b"<html>\n  no such page\n</html>")))

    def log_message(self, *args: Any) -> None:
        pass


class TestForeignAnswers(unittest.TestCase):
    def setUp(self) -> None:
        self.url = serve_stand_in(self, _Foreign)
        self.client = fence.Client(self.url)

    def test_a_gateway_error_page_is_unavailable(self) -> None:
        with self.assertRaises(fence.UnavailableError) as cm:
            self.client.acquire("gateway", ttl=1)
        self.assertEqual(str(cm.exception), "cannot reach the fence server at %s: 502 Bad Gateway" % self.url)
        self.assertEqual(cm.exception.status, 502)

    def test_another_servers_page_is_named_as_such(self) -> None:
        with self.assertRaises(fence.NotFoundError) as cm:
            self.client.acquire("elsewhere", ttl=1)
        self.assertEqual(
            str(cm.exception),
            "unexpected answer from %s (not a fence server?): 404 Not Found: <html> no such page </html>" % self.url,
        )

    def test_a_redirect_is_never_followed(self) -> None:
        with self.assertRaises(fence.FenceError) as cm:
            self.client.acquire("redirect", ttl=1)
        self.assertEqual(cm.exception.status, 307)
        self.assertIn("not a fence server?", str(cm.exception))


class TestHeal(Base):
    def test_heal_raises_the_next_token_past_the_one_seen(self) -> None:
        name = unique("heal")
        first = self.client.acquire(name, ttl=5)
        first.release()
        self.client.heal(name, first.token + 1000)
        nxt = self.client.acquire(name, ttl=5)
        self.assertGreater(nxt.token, first.token + 1000)
        nxt.release()


class TestOwnerRevoke(Base):
    def test_status_reports_the_owner_while_held_and_none_after(self) -> None:
        name = unique("owned")
        owner = "batch-7:4242 ./reconcile.sh \u00e9"
        lease = self.client.acquire(name, ttl=5, owner=owner)
        st = self.client.status(name)
        self.assertEqual((st["held"], st.get("token"), st.get("owner")), (True, lease.token, owner))
        lease.release()
        st = self.client.status(name)
        self.assertEqual((st["held"], st.get("owner")), (False, None))
        anon = self.client.acquire(name, ttl=5, owner="")
        self.assertNotIn("owner", self.client.status(name), "an empty owner names none")
        anon.release()

    def test_lock_context_and_module_lock_pass_the_owner(self) -> None:
        name = unique("owned-ctx")
        with self.client.lock(name, ttl=5, owner="ctx"):
            self.assertEqual(self.client.status(name).get("owner"), "ctx")
        with mock.patch.dict(os.environ, {"FENCE_SERVER": self.server.url}), mock.patch.object(
            fence._client, "_default", None
        ):
            with fence.lock(name, ttl=5, owner="module"):
                self.assertEqual(self.client.status(name).get("owner"), "module")

    def test_an_unprintable_owner_is_refused_by_the_server_naming_the_field(self) -> None:
        name = unique("badowner")
        with self.assertRaises(fence.InvalidError) as cm:
            self.client.acquire(name, ttl=5, owner="a\tb")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "owner"))
        self.assert_free(name)

    def test_an_owner_over_256_bytes_or_not_a_string_is_refused_before_any_request(self) -> None:
        for owner in ["\u00e9" * 129, 7, "\ud800"]:
            with self.assertRaises(fence.InvalidError, msg=repr(owner)) as cm:
                self.client.acquire("job", ttl=5, owner=owner)  # type: ignore[arg-type]
            self.assertEqual((cm.exception.status, cm.exception.field), (None, "owner"))
        self.client.acquire(unique("maxowner"), ttl=5, owner="\u00e9" * 128).release()

    def test_revoke_wakes_a_waiter_with_a_higher_token_and_the_holder_is_lost(self) -> None:
        name = unique("revoke")
        got: List[fence.Lease] = []
        with self.client.lock(name, ttl=0.9, owner="hung") as holder:
            waiter = threading.Thread(target=lambda: got.append(self.other.acquire(name, ttl=5, wait=10)))
            waiter.start()
            time.sleep(0.05)  # the waiter is polling
            self.client.revoke(name)
            waiter.join(10)
            self.assertFalse(waiter.is_alive(), "the waiter was not woken by the revoke")
            self.assertEqual(len(got), 1)
            self.assertGreater(got[0].token, holder.token)
            self.assertTrue(holder.lost.wait(5), "lost not set after the revoke")
            self.assertIsInstance(holder.lost_reason, fence.NotHeldError)
            assert holder.lost_reason is not None
            self.assertEqual(holder.lost_reason.status, 410)
        got[0].release()

    def test_revoke_of_a_lock_not_held_raises_not_held_404(self) -> None:
        name = unique("free")
        for setup in (lambda: None, lambda: self.client.acquire(name, ttl=5).release()):
            setup()
            with self.assertRaises(fence.NotHeldError) as cm:
                self.client.revoke(name)
            self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.name), (404, "not_held", name))
            self.assertEqual(
                str(cm.exception), 'revoke "%s": not held (free, or its lease expired): nothing to revoke' % name
            )
        with self.assertRaises(fence.InvalidError):
            self.client.revoke("")


class TestOwnServer(unittest.TestCase):
    """Tests that stop, restart or configure a server of their own."""

    def test_lost_when_renewals_fail_until_the_deadline_because_the_server_stopped(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        c = fence.Client(srv.url, timeout=2)
        with c.lock(unique("down"), ttl=1.2) as lease:
            srv.stop()
            stopped = time.monotonic()
            self.assertTrue(lease.lost.wait(10), "lost not set after the deadline passed without a renewal")
            # Renewals are retried until the deadline, not given up at the first failure.
            self.assertGreaterEqual(time.monotonic(), lease.deadline)
            self.assertLess(time.monotonic() - stopped, 5)
            assert lease.lost_reason is not None
            self.assertEqual(str(lease.lost_reason), 'lock "%s": lease expired before it was renewed' % lease.name)
        # The exit's release cannot reach the server; the lease is lost anyway, so the
        # with statement does not raise.
        self.assertFalse(lease.released)

    def test_renewal_survives_a_server_restart_shorter_than_the_ttl(self) -> None:
        srv = FenceServer()
        self.addCleanup(srv.close)
        c, other = fence.Client(srv.url, timeout=2), fence.Client(srv.url)
        name = unique("restart")
        with c.lock(name, ttl=3) as lease:
            srv.stop()
            time.sleep(1.2)  # a renewal at ttl/3 fails meanwhile and is retried
            srv.start()  # same port, same data: the store honours the lease (P6)
            time.sleep(2.5)  # past the first deadline: only a retried renewal keeps it
            self.assertFalse(lease.lost.is_set(), lease.lost_reason)
            with self.assertRaises(fence.HeldError):
                other.acquire(name, ttl=1)
        self.assertTrue(lease.released)

    def test_auth_token(self) -> None:
        tmp = tempfile.mkdtemp(prefix="fence-py-auth-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "tokens")
        with open(path, "w") as f:
            f.write("s3cret\n")
        srv = FenceServer("--auth-token-file", path)
        self.addCleanup(srv.close)
        with self.assertRaises(fence.UnauthorizedError) as cm:
            fence.Client(srv.url).acquire("x", ttl=1)
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(fence.UnauthorizedError):
            fence.Client(srv.url, token="wrong").acquire("x", ttl=1)
        fence.Client(srv.url, token="s3cret").acquire(unique("auth"), ttl=1).release()
        with mock.patch.dict(os.environ, {"FENCE_AUTH_TOKEN": "s3cret"}):
            fence.Client(srv.url).acquire(unique("authenv"), ttl=1).release()


if __name__ == "__main__":
    unittest.main()
