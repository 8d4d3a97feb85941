#!/usr/bin/env bash
# Runs the end-to-end suite (test/e2e) in cluster mode against fleetd on the
# local cluster (make cluster): the images built from this checkout are
# loaded into every node, fleetd is deployed with kubectl apply -k
# test/e2e/config (config/default with the suite's short progress
# interval), its gateway Service is forwarded to loopback, and the suite
# runs with FLEETD_E2E_KUBECONFIG, FLEETD_E2E_GATEWAY_URL and
# FLEETD_E2E_CLUSTER_STATE set (the last lets it lose nodes, and serve the
# stand-in model where pods reach it, for the real agent CLIs in the worker
# image). Members run in Pods of their own across the nodes, config/default's
# default.
#
# It needs root and a running local cluster (make cluster). On failure it
# prints pods, events and logs; at exit it removes what it deployed and
# leaves the cluster up (make cluster-down tears it down).
#
# Environment:
#   GATEWAY_PORT   local port the gateway Service is forwarded to (default: a free one)
#   GO_TEST_FLAGS  more flags for go test, such as "-run TestReply"
#   SKIP_IMAGES=1  use the images already loaded
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${CLUSTER_STATE:-"$root/.cluster"}
kubeconfig=$state/kubeconfig
port=${GATEWAY_PORT:-}
namespace=fleetd-system
kubectl=$root/bin/controlplane/kubectl

log() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'e2e-cluster: %s\n' "$*" >&2
	exit 1
}

((EUID == 0)) || die "needs root, as the local cluster does"
[[ -f $kubeconfig ]] || die "no local cluster: run make cluster first"
[[ -x $kubectl ]] || die "no kubectl in bin/controlplane: run make controlplane"

k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
# shellcheck source=hack/e2e-lib.sh
source "$root/hack/e2e-lib.sh"

# A port nothing listens on yet.
if [[ -z $port ]]; then
	for p in $(seq 18080 18999); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			port=$p
			break
		fi
	done
fi

work=$(mktemp -d)
forward_pid=""

finish() {
	local status=$?
	if [[ -n $forward_pid ]]; then
		kill "$forward_pid" 2>/dev/null || true
		wait "$forward_pid" 2>/dev/null || true
	fi
	if ((status != 0)); then
		e2e_diagnostics
	fi
	log "Removing what the suite deployed"
	k delete members,delegations,profiles --all -n default --wait=false >/dev/null 2>&1 || true
	k delete -k "$root/test/e2e/config" --wait=true --timeout=120s >/dev/null 2>&1 || true
	rm -rf "$work"
	exit "$status"
}
trap finish EXIT

if [[ ${SKIP_IMAGES:-} != 1 ]]; then
	log "Building fleetd's images and loading them into every node"
	(cd "$root/test" && go run ./cmd/images --only=fleetd,worker --load --state="$state")
fi

e2e_deploy

log "Forwarding the gateway to 127.0.0.1:$port"
e2e_forward &
forward_pid=$!

log "Running the end-to-end suite against the local cluster"
e2e_run "$kubeconfig" FLEETD_E2E_CLUSTER_STATE="$state"
