#!/usr/bin/env bash
# bench-compare.sh BASE [BENCH] [PKG]: runs benchmark BENCH of package PKG
# on git revision BASE and on the working tree, one after the other in this
# one run, on the same machine, and prints both. These machines are noisy:
# compare the two numbers of one run, not numbers of different runs.
#
#   hack/bench-compare.sh HEAD~1 BenchmarkThousandDelegations ./controllers/
#
# A package under test/ (./test/browser/) is run in the test module there.
set -o errexit -o nounset -o pipefail

base=${1:?usage: bench-compare.sh BASE [BENCH] [PKG]}
bench=${2:-BenchmarkThousandDelegations}
pkg=${3:-./controllers/}
root=$(git rev-parse --show-toplevel)
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/controlplane}

tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach "$tree" "$base" >/dev/null

dir=.
if [[ $pkg == ./test/* ]]; then
	dir=test
	pkg=./${pkg#./test/}
fi

run() {
	(cd "$1/$dir" && go test -run '^$' -bench "^$bench\$" -benchtime=1x -timeout 30m "$pkg") |
		grep -E "^(Benchmark|ok|FAIL)" | sed "s|^|$2  |"
}
echo "== $bench on $(git -C "$root" rev-parse --short "$base") (base) and the working tree"
run "$tree" "base"
run "$root" "this"
