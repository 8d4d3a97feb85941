#!/usr/bin/env bash
# Builds the dashboard (gateway/ui/src) into gateway/ui/dist, which the
# gateway embeds. The front-end packages (xterm.js, esbuild, TypeScript) are
# pinned by gateway/ui/package.json and package-lock.json and installed from
# the npm registry into gateway/ui/node_modules; a stamp of the lockfile
# decides whether that needs doing, so a second run only builds.
#
# The build is reproducible: the same sources and pins give byte-identical
# files (no timestamps, no absolute paths, no source maps), so `make verify`
# rebuilds and fails when dist/ differs from what is committed.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ui="$root/gateway/ui"
modules="$ui/node_modules"
cd "$ui"

stamp=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [[ ! -f "$modules/.stamp" || "$(cat "$modules/.stamp")" != "$stamp" ]]; then
	command -v npm >/dev/null || { echo "make ui needs npm (Node.js) to install the pinned front-end packages" >&2; exit 1; }
	echo "Installing the dashboard's pinned front-end packages into $modules" >&2
	npm ci --no-audit --no-fund --loglevel=error
	echo "$stamp" > "$modules/.stamp"
fi

"$modules/.bin/tsc" -p tsconfig.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$modules/.bin/esbuild" src/main.ts --bundle --minify --format=esm --target=es2022 \
	--legal-comments=none --charset=utf8 --log-level=warning --outfile="$out/app.js"
"$modules/.bin/esbuild" src/style.css --bundle --minify --charset=utf8 --log-level=warning --outfile="$out/app.css"
cp src/index.html "$out/index.html"
# The licenses of what app.js and app.css bundle, since the minified
# bundle drops their comments.
{
	echo "The dashboard bundles these packages; their licenses follow."
	for pkg in @xterm/xterm; do
		echo
		echo "== $pkg $(node -p "require('$modules/$pkg/package.json').version")"
		echo
		cat "$modules/$pkg/LICENSE"
	done
} > "$out/LICENSES.txt"
rm -rf dist
mkdir dist
cp "$out"/* dist/
