#!/usr/bin/env bash
# Runs the TypeScript client's tests against a real `fence serve` built from this
# repository. Callable from anywhere (CI: bash clients/typescript/test.sh from the
# repo root). Needs npm and Go (or FENCE_BIN, a built fence); a Node.js of at
# least 20.3 is found or installed by scripts/node.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# A Node.js of at least 20.3 first in PATH: the system's, or one scripts/node.sh
# installs into a cache from the npm registry (Debian 12 ships Node.js 18).
. "$root/scripts/node.sh" || exit 1
echo "clients/typescript/test.sh: $(command -v node) $(node --version)"

cd "$here"
# npm ci when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fence-ts-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if [ -z "${FENCE_BIN:-}" ]; then
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		PATH="$PATH:/usr/local/go/bin"
	fi
	(cd "$root" && go build -o "$tmp/fence" ./cmd/fence)
	export FENCE_BIN="$tmp/fence"
fi

# Type-check the sources, then run the tests (dist.test.mjs also checks that the
# committed dist/ is what tsc makes of src/).
node node_modules/typescript/bin/tsc -p tsconfig.json --noEmit
node --test test/*.test.mjs
