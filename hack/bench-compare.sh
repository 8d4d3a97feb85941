#!/usr/bin/env bash
# bench-compare.sh BASE [BENCH] [PKGS]: runs the benchmarks BENCH (a
# regular expression) of the packages PKGS on git revision BASE and on the
# working tree, one after the other in this one run, on the same machine,
# and prints both. These machines are noisy: compare the two numbers of one
# run, not numbers of different runs.
#
#   hack/bench-compare.sh HEAD~1 BenchmarkThousandDelegations ./controllers/
#
# PKGS is a space-separated list. A package under test/ (./test/browser/)
# is run in the test module there. A package that lived elsewhere on BASE
# is written PKG=BASEPKG:
#
#   hack/bench-compare.sh c6dd9e4 'BenchmarkHeldCalls|BenchmarkDashboardEventToScreen' \
#     './gateway/ ./test/browser/=./gateway/'
set -o errexit -o nounset -o pipefail

base=${1:?usage: bench-compare.sh BASE [BENCH] [PKGS]}
bench=${2:-BenchmarkThousandDelegations}
pkgs=${3:-./controllers/}
root=$(git rev-parse --show-toplevel)
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/controlplane}

tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach "$tree" "$base" >/dev/null

# run TREE LABEL PKG runs the benchmarks of PKG in TREE, in the test
# module when PKG is under test/ there.
run() {
	local dir=. pkg=$3
	if [[ $pkg == ./test/* && -f $1/test/go.mod ]]; then
		dir=test
		pkg=./${pkg#./test/}
	fi
	(cd "$1/$dir" && go test -run '^$' -bench "^($bench)\$" -benchtime=1x -timeout 30m "$pkg") |
		grep -E "^(Benchmark|ok|FAIL)" | sed "s|^|$2  |"
}
echo "== $bench on $(git -C "$root" rev-parse --short "$base") (base) and the working tree"
# Each package runs once on either side, however many entries name it; a
# failed run is shown and the others still run.
declare -A ran=()
for entry in $pkgs; do
	this=${entry%%=*}
	was=$this
	[[ $entry == *=* ]] && was=${entry#*=}
	if [[ -z ${ran[base $was]:-} ]]; then
		ran[base $was]=1
		run "$tree" "base" "$was" || true
	fi
	if [[ -z ${ran[this $this]:-} ]]; then
		ran[this $this]=1
		run "$root" "this" "$this" || true
	fi
done
