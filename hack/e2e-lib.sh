# What hack/e2e-cluster.sh and hack/e2e-kind.sh do alike once a cluster
# runs: deploy fleetd from test/e2e/config, keep its gateway forwarded to
# loopback, run the suite in cluster mode, and show what went wrong. The
# scripts source it after setting root, namespace, port and work, and
# defining k (kubectl for the cluster) and log.

# e2e_diagnostics prints the cluster's pods, events and fleetd's logs.
e2e_diagnostics() {
	log "Diagnostics"
	k get nodes -o wide || true
	k get pods -A -o wide || true
	k get fleet -A -o wide || true
	k get events -A --sort-by=.lastTimestamp | tail -n 120 || true
	k describe pods -n "$namespace" || true
	for container in fleetd herdr; do
		log "Log of container $container"
		k logs -n "$namespace" deployment/fleetd -c "$container" --tail=300 || true
		log "Log of container $container before its last restart, if any"
		k logs -n "$namespace" deployment/fleetd -c "$container" --previous --tail=100 2>/dev/null || true
	done
	if [[ -f $work/port-forward.log ]]; then
		log "Port-forward log"
		tail -n 50 "$work/port-forward.log" || true
	fi
}

# e2e_deploy applies test/e2e/config (config/default with the suite's
# short intervals) and waits for fleetd.
e2e_deploy() {
	log "Deploying fleetd (test/e2e/config: config/default with the suite's intervals)"
	k apply -k "$root/test/e2e/config"
	k wait --for=condition=Established --timeout=60s \
		crd/members.fleet.fleetd.dev crd/delegations.fleet.fleetd.dev crd/profiles.fleet.fleetd.dev
	k rollout status -n "$namespace" deployment/fleetd --timeout=300s
}

# e2e_forward keeps the gateway Service forwarded to $port. kubectl
# port-forward exits when a forwarded connection fails, as it does while
# the suite restarts the fleetd container, so it is started again each
# time. Run it in the background; TERM stops it.
e2e_forward() {
	local pid=""
	trap 'if [[ -n $pid ]]; then kill "$pid" 2>/dev/null; fi; exit 0' TERM
	while :; do
		k port-forward -n "$namespace" service/fleetd-gateway "$port:8080" --address 127.0.0.1 >>"$work/port-forward.log" 2>&1 &
		pid=$!
		wait "$pid" || true
		sleep 1
	done
}

# e2e_run runs the suite in cluster mode against kubeconfig $1, with the
# environment assignments that follow (NAME=VALUE) and GO_TEST_FLAGS.
e2e_run() {
	local kubeconfig=$1
	shift
	local flags
	read -r -a flags <<<"${GO_TEST_FLAGS:-}"
	(
		cd "$root/test"
		env FLEETD_E2E_KUBECONFIG="$kubeconfig" \
			FLEETD_E2E_GATEWAY_URL="http://127.0.0.1:$port/mcp" \
			"$@" \
			go test -count=1 -v -timeout 40m ${flags[@]+"${flags[@]}"} ./e2e/
	)
}
