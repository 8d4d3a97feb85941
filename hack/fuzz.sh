#!/usr/bin/env bash
# Runs every fuzz target of the main module for a short time each (default 5s),
# on top of its seed corpus. go test -fuzz takes one target and one package at
# a time, so this walks them.
set -o errexit -o nounset -o pipefail

fuzztime=${1:-5s}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

found=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		found=$((found + 1))
		echo "fuzz $pkg $target for $fuzztime"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done < <(git ls-files -co --exclude-standard '*_test.go' | grep -v '^hack/controlplane/' | xargs grep -l '^func Fuzz' || true)
echo "fuzz: $found targets"
