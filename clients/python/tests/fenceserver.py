"""Test helper: a real `fence serve` on a free 127.0.0.1 port with its data in a
temporary directory, built from the repository (or FENCE_BIN)."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest
import uuid
from typing import Dict, List, Optional, Type

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

_bin_lock = threading.Lock()
_bin: Optional[str] = None
_bin_dir: Optional[str] = None

_LISTENING = re.compile(r"url=(\S+)")


def fence_bin() -> str:
    """Returns the fence binary: $FENCE_BIN, else one built once from the repository
    with `go build` into a temporary directory."""
    global _bin, _bin_dir
    with _bin_lock:
        if _bin is not None:
            return _bin
        env_bin = os.environ.get("FENCE_BIN")
        if env_bin:
            if not os.access(env_bin, os.X_OK):
                raise RuntimeError("FENCE_BIN=%s is not an executable file" % env_bin)
            _bin = env_bin
            return _bin
        go = shutil.which("go") or "/usr/local/go/bin/go"
        _bin_dir = tempfile.mkdtemp(prefix="fence-py-bin-")
        out = os.path.join(_bin_dir, "fence")
        r = subprocess.run(
            [go, "build", "-o", out, "./cmd/fence"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
        )
        if r.returncode != 0:
            raise RuntimeError("go build ./cmd/fence failed:\n%s" % r.stderr)
        _bin = out
        return _bin


class FenceServer:
    """A running `fence serve --listen 127.0.0.1:PORT --data DIR extra...`. ``url`` is
    its base URL. stop() ends it (SIGTERM, then SIGKILL); start() runs it again on
    the same port and data, as a restart."""

    def __init__(self, *extra: str, data: Optional[str] = None) -> None:
        self.extra: List[str] = list(extra)
        self._own_data = data is None
        self.data: str = data or tempfile.mkdtemp(prefix="fence-py-data-")
        self.listen = "127.0.0.1:0"
        self.url = ""
        self._proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self._logs: List[str] = []
        self._logs_mu = threading.Lock()
        self.start()

    def start(self, timeout: float = 30.0) -> None:
        args = [fence_bin(), "serve", "--listen", self.listen, "--data", self.data, "--log-level", "info"]
        args += self.extra
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._proc = proc
        found: "list[str]" = []
        ready = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                with self._logs_mu:
                    self._logs.append(line)
                m = _LISTENING.search(line)
                if m and "listening" in line and not ready.is_set():
                    found.append(m.group(1))
                    ready.set()
            ready.set()  # exited

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not ready.wait(timeout) or not found:
            self.kill()
            raise RuntimeError("fence serve did not log that it listens within %gs:\n%s" % (timeout, self.log()))
        self.url = found[0].rstrip("/")
        self.listen = self.url.split("://", 1)[1]  # a restart keeps the port

    def log(self) -> str:
        with self._logs_mu:
            return "\n".join(self._logs)

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the server gracefully (SIGTERM), killing it if it takes over timeout."""
        p = self._proc
        if p is None:
            return
        if p.poll() is not None:
            self._close_pipe()
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)
        self._close_pipe()

    def kill(self) -> None:
        """Kills the server (SIGKILL, a crash)."""
        p = self._proc
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(30)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
        if self._proc is not None and self._proc.stderr is not None:
            self._proc.stderr.close()

    def close(self) -> None:
        """Stops the server and removes its data directory."""
        self.stop()
        if self._own_data:
            shutil.rmtree(self.data, ignore_errors=True)


def cleanup_bin() -> None:
    """Removes the binary built by fence_bin, if it built one."""
    global _bin, _bin_dir
    with _bin_lock:
        if _bin_dir is not None:
            shutil.rmtree(_bin_dir, ignore_errors=True)
            _bin_dir = None
            _bin = None


def unique(prefix: str) -> str:
    """Returns a lock name or key no other test uses."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def serve_stand_in(test: unittest.TestCase, handler: Type[http.server.BaseHTTPRequestHandler]) -> str:
    """Serves handler, a stand-in for another server (a proxy, an older fence), on a
    free 127.0.0.1 port until test ends; returns its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    test.addCleanup(t.join, 5)
    test.addCleanup(httpd.server_close)
    test.addCleanup(httpd.shutdown)
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def answer(
    h: http.server.BaseHTTPRequestHandler, status: int, headers: Dict[str, str], body: bytes
) -> None:
    """Sends the answer of a stand-in's handler h."""
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
