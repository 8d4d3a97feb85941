#!/usr/bin/env bash
# Runs every fuzz target of the main module briefly (default 20000 inputs
# each), on top of its seed corpus. go test -fuzz takes one target and one
# package at a time, so this walks them.
#
# The budget is a count of inputs, not a duration: with a duration, Go 1.26's
# fuzz coordinator can report "context deadline exceeded" as a failure when
# its deadline fires while a worker is mid-call (golang/go#75804, fixed in Go
# 1.27), which fails CI on a busy machine without any failing input. A count
# has no deadline to race. Minimizing a new interesting input is bounded the
# same way, since its default is a 60 s wall-clock budget per input.
set -o errexit -o nounset -o pipefail

fuzztime=${1:-20000x}
minimizetime=${2:-200x}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

found=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		found=$((found + 1))
		echo "fuzz $pkg $target for $fuzztime"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" "$pkg"
	done
done < <(git ls-files -co --exclude-standard '*_test.go' | grep -v '^hack/controlplane/' | xargs grep -l '^func Fuzz' || true)
echo "fuzz: $found targets"
