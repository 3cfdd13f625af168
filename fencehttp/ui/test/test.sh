#!/bin/sh
# Browser tests of the fence dashboard (/ui): builds fence, installs playwright-core
# (no browser download: it drives Debian's chromium), runs node --test.
# From the repo root: sh fencehttp/ui/test/test.sh
# Needs: go, npm, and chromium at /usr/bin/chromium (or $CHROMIUM); a Node.js of at
# least 20.3 is found or installed by scripts/node.sh.
# FENCE_UI_SCREENSHOTS=DIR keeps the screenshots there (else a temp dir, printed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
	echo "test.sh: no chromium at $chromium (apt-get install -y chromium, or set CHROMIUM)" >&2
	exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fence-ui-test.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
. "$root/scripts/node.sh" || exit 1
(cd "$root" && go build -o "$work/fence" ./cmd/fence)
cd "$here"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
FENCE_BIN="$work/fence" CHROMIUM="$chromium" node --test --test-concurrency=1 dashboard.test.mjs
