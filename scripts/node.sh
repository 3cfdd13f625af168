# node.sh: puts a Node.js of at least 20.3 first in PATH, for the tests that run
# Node (the TypeScript client, the dashboard, the OpenAPI lint). Sourced, from sh
# or bash:
#
#   . "$root/scripts/node.sh" || exit 1
#
# The system's node is used when it is new enough. Otherwise (Debian 12 ships
# Node.js 18) the official Node.js binary of $fence_node_version is installed from
# the npm registry's node-linux-<arch> package with the system's npm, once, into
# a cache ($FENCE_NODE_CACHE, else ~/.cache/fence/node), and that is put first in
# PATH. Run as a command (sh scripts/node.sh) it does the same and prints the node
# it chose: scripts/install-deps.sh runs it so that the tests find it ready.

fence_node_min=20.3.0
fence_node_version=22.23.5

# fence_node_ok NODE: is NODE a Node.js of at least $fence_node_min?
fence_node_ok() {
	_v=$("$1" --version 2>/dev/null) || return 1
	_v=${_v#v}
	[ "$(printf '%s\n%s\n' "$fence_node_min" "$_v" | sort -V | head -n1)" = "$fence_node_min" ]
}

# fence_node: make PATH's node one of at least $fence_node_min, installing it into
# the cache if need be; returns non-zero, saying why on stderr, if it cannot.
fence_node() {
	if command -v node >/dev/null 2>&1 && fence_node_ok node; then
		return 0
	fi
	case $(uname -m) in
	x86_64 | amd64) _arch=x64 ;;
	aarch64 | arm64) _arch=arm64 ;;
	*)
		echo "node.sh: Node.js ${fence_node_min} or later is needed and this machine's $(uname -m) has no node-linux package: install it by hand" >&2
		return 1
		;;
	esac
	_cache=${FENCE_NODE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fence/node}
	_dir=$_cache/node-v$fence_node_version-linux-$_arch
	if [ ! -x "$_dir/bin/node" ] || ! fence_node_ok "$_dir/bin/node"; then
		_have=none
		command -v node >/dev/null 2>&1 && _have=$(node --version 2>/dev/null)
		if ! command -v npm >/dev/null 2>&1; then
			echo "node.sh: Node.js $_have is older than $fence_node_min and npm is missing to fetch a newer one (Debian: apt-get install npm)" >&2
			return 1
		fi
		echo "node.sh: Node.js $_have is older than $fence_node_min: installing Node.js $fence_node_version (npm package node-linux-$_arch) into $_dir" >&2
		mkdir -p "$_cache" || return 1
		_tmp=$(mktemp -d "$_cache/.fetch.XXXXXX") || return 1
		# npm pack checks the tarball against the registry's integrity hash.
		if ! (cd "$_tmp" && npm pack --silent "node-linux-$_arch@$fence_node_version" >/dev/null) ||
			! tar -xzf "$_tmp/node-linux-$_arch-$fence_node_version.tgz" -C "$_tmp" ||
			! fence_node_ok "$_tmp/package/bin/node"; then
			rm -rf "$_tmp"
			echo "node.sh: could not install Node.js $fence_node_version from the npm registry" >&2
			return 1
		fi
		rm -rf "$_dir"
		mv "$_tmp/package" "$_dir" && rm -rf "$_tmp" || return 1
	fi
	PATH=$_dir/bin:$PATH
	export PATH
}

case ${0##*/} in
node.sh)
	# Run as a command.
	set -eu
	fence_node
	echo "node.sh: $(command -v node) $(node --version)"
	;;
*)
	fence_node
	;;
esac
