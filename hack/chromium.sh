#!/usr/bin/env bash
# Installs Debian's chromium package, which the dashboard's browser tests
# drive headless (test/framework/browsertest), when /usr/bin/chromium is
# missing.
# The browser is there after the first run, so a second run is instant.
set -o errexit -o nounset -o pipefail

path=${FLEETD_CHROMIUM:-/usr/bin/chromium}
if [[ -x "$path" ]]; then
	exit 0
fi
if [[ "$path" != /usr/bin/chromium ]]; then
	echo "FLEETD_CHROMIUM=$path is not an executable" >&2
	exit 1
fi
command -v apt-get >/dev/null || { echo "the browser tests need Chromium at /usr/bin/chromium: install your system's chromium package" >&2; exit 1; }
sudo=
if [[ $(id -u) != 0 ]]; then
	sudo=sudo
fi
echo "Installing Debian's chromium for the browser tests" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
"$path" --version >&2
