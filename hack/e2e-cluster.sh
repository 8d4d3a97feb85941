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

diagnostics() {
	log "Diagnostics"
	k get nodes -o wide || true
	k get pods -A -o wide || true
	k get fleet -A -o wide || true
	k get events -A --sort-by=.lastTimestamp | tail -n 80 || true
	for container in fleetd herdr; do
		log "Log of container $container"
		k logs -n "$namespace" deployment/fleetd -c "$container" --tail=300 || true
	done
	if [[ -f $work/port-forward.log ]]; then
		log "Port-forward log"
		tail -n 30 "$work/port-forward.log" || true
	fi
}

finish() {
	local status=$?
	if [[ -n $forward_pid ]]; then
		kill "$forward_pid" 2>/dev/null || true
		wait "$forward_pid" 2>/dev/null || true
	fi
	if ((status != 0)); then
		diagnostics
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
	(cd "$root" && go run ./hack/images --only=fleetd,worker --load --state="$state")
fi

log "Deploying fleetd (test/e2e/config: config/default with the suite's intervals)"
k apply -k "$root/test/e2e/config"
k wait --for=condition=Established --timeout=60s \
	crd/members.fleet.fleetd.dev crd/delegations.fleet.fleetd.dev crd/profiles.fleet.fleetd.dev
k rollout status -n "$namespace" deployment/fleetd --timeout=300s

# forward keeps the gateway Service forwarded to $port. kubectl
# port-forward exits when a forwarded connection fails, as it does while the
# suite restarts the fleetd container, so it is started again each time.
forward() {
	local pid=""
	trap 'if [[ -n $pid ]]; then kill "$pid" 2>/dev/null; fi; exit 0' TERM
	while :; do
		k port-forward -n "$namespace" service/fleetd-gateway "$port:8080" --address 127.0.0.1 >>"$work/port-forward.log" 2>&1 &
		pid=$!
		wait "$pid" || true
		sleep 1
	done
}

log "Forwarding the gateway to 127.0.0.1:$port"
forward &
forward_pid=$!

log "Running the end-to-end suite against the local cluster"
read -r -a flags <<<"${GO_TEST_FLAGS:-}"
(
	cd "$root"
	FLEETD_E2E_KUBECONFIG=$kubeconfig \
		FLEETD_E2E_GATEWAY_URL=http://127.0.0.1:$port/mcp \
		FLEETD_E2E_CLUSTER_STATE=$state \
		go test -count=1 -v -timeout 40m ${flags[@]+"${flags[@]}"} ./test/e2e/
)
