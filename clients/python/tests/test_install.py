"""Tests that the package installs offline with pip and ships its type marker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

PROJECT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _has_pip() -> bool:
    r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, timeout=60)
    return r.returncode == 0


@unittest.skipUnless(_has_pip(), "pip is not installed for %s (Debian: apt-get install python3-pip)" % sys.executable)
class TestInstall(unittest.TestCase):
    def test_pip_installs_offline_without_build_isolation(self) -> None:
        target = tempfile.mkdtemp(prefix="fence-py-install-")
        self.addCleanup(shutil.rmtree, target, True)
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_WARN_SCRIPT_LOCATION="1")
        r = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--target", target, PROJECT],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        self.assertEqual(r.returncode, 0, "pip install failed:\n%s\n%s" % (r.stdout, r.stderr))
        self.assertTrue(os.path.exists(os.path.join(target, "fence", "py.typed")), "py.typed not installed")
        with open(os.path.join(PROJECT, "src", "fence", "__init__.py"), encoding="utf-8") as f:
            want = re.search(r'__version__ = "([^"]+)"', f.read())
        assert want is not None
        # Import the installed copy, not the source tree, from a neutral directory.
        r = subprocess.run(
            [sys.executable, "-c", "import fence, sys; print(fence.__file__); print(fence.__version__)"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=target,
            env=dict(os.environ, PYTHONPATH=target),
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        path, version = r.stdout.split()
        self.assertTrue(path.startswith(target), path)
        self.assertEqual(version, want.group(1))
        with open(os.path.join(target, "fence_client-%s.dist-info" % version, "METADATA"), encoding="utf-8") as f:
            self.assertIn("Version: %s\n" % version, f.read())


if __name__ == "__main__":
    unittest.main()
