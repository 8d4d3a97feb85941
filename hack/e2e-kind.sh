#!/usr/bin/env bash
# Runs the end-to-end suite (test/e2e) against fleetd in a kind cluster: the
# same tests `make test-e2e` runs against local processes, here against the
# image built from this checkout and deployed with config/default.
#
# It needs a running Docker engine, kind, kubectl and Go, and cannot run on
# machines without a Docker engine, such as the ones fleetd is developed on;
# there, `make test-e2e` runs the same suite against local processes.
#
# Steps: create a kind cluster, build the images (fleetd and the worker
# image member Pods run) and load them into the cluster, apply test/e2e/config (config/default with the short turn-settle
# and progress intervals the local run uses), wait for the fleetd
# Deployment, port-forward the gateway Service, and run the suite with
# FLEETD_E2E_KUBECONFIG and FLEETD_E2E_GATEWAY_URL set. The suite acts as a
# primary with a service-account token it mints (audience fleetd), so no
# static token is set up. On failure the script prints pods, events and
# logs; at exit it deletes the cluster unless KEEP_CLUSTER=1.
#
# Environment:
#   KIND_CLUSTER_NAME  cluster to create (default fleetd-e2e); it must not exist yet
#   KIND_NODE_IMAGE    kind node image (default: kind's own)
#   KEEP_CLUSTER=1     keep the cluster at exit, to look around
#   GATEWAY_PORT       local port the gateway Service is forwarded to (default 18080)
#   GO_TEST_FLAGS      more flags for go test, such as "-run TestReply"
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=${KIND_CLUSTER_NAME:-fleetd-e2e}
port=${GATEWAY_PORT:-18080}
# The images config/manager names, and the namespace config/default uses.
image=fleetd:dev
worker=fleetd-worker:dev
namespace=fleetd-system

log() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'e2e-kind: %s\n' "$*" >&2
	exit 1
}

for tool in docker kind kubectl go; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers; this script needs one (make test-e2e runs the suite without)"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	die "kind cluster $cluster exists; delete it (kind delete cluster --name $cluster) or set KIND_CLUSTER_NAME"
fi

work=$(mktemp -d)
kubeconfig=$work/kubeconfig
forward_pid=""

k() { kubectl --kubeconfig "$kubeconfig" "$@"; }
# shellcheck source=hack/e2e-lib.sh
source "$root/hack/e2e-lib.sh"

finish() {
	local status=$?
	if [[ -n $forward_pid ]]; then
		kill "$forward_pid" 2>/dev/null || true
		wait "$forward_pid" 2>/dev/null || true
	fi
	if ((status != 0)); then
		e2e_diagnostics
	fi
	if [[ ${KEEP_CLUSTER:-} == 1 ]]; then
		log "Keeping kind cluster $cluster. Reach it with: kind export kubeconfig --name $cluster"
		log "Delete it with: kind delete cluster --name $cluster"
	else
		log "Deleting kind cluster $cluster"
		kind delete cluster --name "$cluster" || true
	fi
	rm -rf "$work"
	exit "$status"
}
trap finish EXIT

log "Creating kind cluster $cluster"
create=(--name "$cluster" --kubeconfig "$kubeconfig" --wait 180s)
if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
	create+=(--image "$KIND_NODE_IMAGE")
fi
kind create cluster "${create[@]}"

log "Building $image and $worker"
docker build --tag "$image" "$root"
docker build --target worker --tag "$worker" "$root"
for img in "$image" "$worker"; do
	log "Loading $img into $cluster"
	kind load docker-image "$img" --name "$cluster"
done

e2e_deploy

log "Forwarding the gateway to 127.0.0.1:$port"
e2e_forward &
forward_pid=$!

log "Running the end-to-end suite against $cluster"
e2e_run "$kubeconfig"
