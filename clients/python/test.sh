#!/bin/sh
# Tests of the Python client against a real `fence serve`. Callable from anywhere
# (CI calls it from the repository root): it builds the fence binary from the
# repository, then runs the unittest suite with python3 (or $PYTHON). Needs Go and
# Python 3.9+; the install test also needs pip (skipped, and said so, without it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
export PATH="$PATH:/usr/local/go/bin"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fence-py-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -z "${FENCE_BIN:-}" ]; then
	(cd "$root" && go build -o "$tmp/fence" ./cmd/fence)
	FENCE_BIN="$tmp/fence"
fi
export FENCE_BIN

cd "$here"
"$python" --version
PYTHONDONTWRITEBYTECODE=1 "$python" -W error::ResourceWarning -m unittest discover -s tests -t tests -v "$@"
