#!/usr/bin/env bash
# Installs the agent CLIs fleetd's tests run for real, pinned by
# hack/agents/package.json and package-lock.json, from the npm registry into
# $BIN/agents, and links $BIN/claude and $BIN/codex to them. A stamp of the
# lockfile decides whether anything needs doing, so a second run is instant.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-"$root/bin"}
dir="$bin/agents"
pins="$root/hack/agents"

stamp=$(cat "$pins/package.json" "$pins/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ -x "$bin/claude" && -x "$bin/codex" && -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" ]]; then
	exit 0
fi

command -v npm >/dev/null || { echo "make agents needs npm (Node.js) to install the pinned agent CLIs" >&2; exit 1; }
echo "Installing the pinned agent CLIs into $dir" >&2
mkdir -p "$dir"
rm -f "$dir/.stamp"
cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
ln -sfn agents/node_modules/.bin/claude "$bin/claude"
ln -sfn agents/node_modules/.bin/codex "$bin/codex"
"$bin/claude" --version >&2
"$bin/codex" --version >&2
echo "$stamp" > "$dir/.stamp"
