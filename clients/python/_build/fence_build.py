"""An in-tree PEP 517 build backend for the fence client, standard library only.

It exists so that `pip install ./clients/python` works offline on any Python 3.9+,
with or without build isolation: it needs no setuptools, wheel or other package
from an index. It builds a pure-Python wheel of src/fence (and an sdist), with the
metadata of pyproject.toml's [project] table, and supports editable installs
(PEP 660) through a .pth file.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
PACKAGE = "fence"


def _project() -> Dict[str, str]:
    """Returns the string fields of pyproject.toml's [project] table (the only TOML
    this backend needs: `key = "value"` lines)."""
    fields: Dict[str, str] = {}
    table = ""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            m = re.match(r"^\[([^\]]+)\]$", line)
            if m:
                table = m.group(1).strip()
                continue
            m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"([^"\\]*)"\s*$', line)
            if table == "project" and m:
                fields[m.group(1)] = m.group(2)
    for k in ("name", "version", "description", "requires-python"):
        if k not in fields:
            raise RuntimeError("pyproject.toml: [project] has no %s" % k)
    return fields


def _dist_name(p: Dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p: Dict[str, str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % p["name"],
        "Version: %s" % p["version"],
        "Summary: %s" % p["description"],
        "Requires-Python: %s" % p["requires-python"],
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
    ]
    readme = os.path.join(ROOT, "README.md")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            body = f.read()
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + body
    return "\n".join(lines) + "\n"


def _package_files() -> List[Tuple[str, str]]:
    """Returns (path in the wheel, path on disk) of the package's files."""
    out = []
    pkg = os.path.join(SRC, PACKAGE)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            out.append(("%s/%s" % (PACKAGE, name), os.path.join(pkg, name)))
    return out


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(wheel_directory: str, files: List[Tuple[str, bytes]]) -> str:
    p = _project()
    dist = _dist_name(p)
    info = "%s-%s.dist-info" % (dist, p["version"])
    files = list(files) + [
        ("%s/METADATA" % info, _metadata(p).encode("utf-8")),
        (
            "%s/WHEEL" % info,
            b"Wheel-Version: 1.0\nGenerator: fence_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        ("%s/top_level.txt" % info, (PACKAGE + "\n").encode("ascii")),
    ]
    record = [_record_line(path, data) for path, data in files]
    record.append("%s/RECORD,," % info)
    files.append(("%s/RECORD" % info, ("\n".join(record) + "\n").encode("utf-8")))
    name = "%s-%s-py3-none-any.whl" % (dist, p["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 and PEP 660 hooks ---


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    return _write_wheel(wheel_directory, [(arc, _read(disk)) for arc, disk in _package_files()])


def build_editable(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    p = _project()
    pth = "%s.pth" % _dist_name(p)
    return _write_wheel(wheel_directory, [(pth, (SRC + "\n").encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    name = base + ".tar.gz"
    paths = ["pyproject.toml", "README.md", "_build/fence_build.py"]
    paths += [os.path.relpath(disk, ROOT) for _, disk in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in paths:
            disk = os.path.join(ROOT, rel)
            if os.path.exists(disk):
                t.add(disk, arcname="%s/%s" % (base, rel.replace(os.sep, "/")), recursive=False)
        info = _metadata(p).encode("utf-8")
        ti = tarfile.TarInfo("%s/PKG-INFO" % base)
        ti.size = len(info)
        ti.mode = 0o644
        t.addfile(ti, io.BytesIO(info))
    return name
