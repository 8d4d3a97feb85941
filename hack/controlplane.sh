#!/usr/bin/env bash
# Builds Kubernetes components from pinned Go modules into bin/controlplane.
#
#   hack/controlplane.sh          kube-apiserver, kube-controller-manager, etcd
#                                 and the kubectl of the same release (what the
#                                 tests, `fleetd dev` and the README use)
#   hack/controlplane.sh node     kube-scheduler, kubelet, kube-proxy (from the
#                                 same module): what the local cluster adds
#   hack/controlplane.sh coredns  the cluster DNS (hack/coredns), static, since
#                                 its image holds nothing but the binary
#   hack/controlplane.sh netpol   the NetworkPolicy engine (hack/netpol): the
#                                 pinned kube-network-policies, one per node
#
# A version stamp of the pinned module files and the Go version decides
# whether a build is needed, so a second run is instant. Everything comes from
# the Go module proxy. A first build takes minutes: it prints a progress line
# now and then (packages compiled of the total, elapsed time) and how long it
# took.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${CONTROLPLANE_BIN:-"$root/bin/controlplane"}
set=${1:-controlplane}
# cgo stays as Go defaults it, except where a binary must run with no libc.
cgo=${CGO_ENABLED:-}
# PROGRESS_EVERY is how many seconds pass between progress lines.
every=${PROGRESS_EVERY:-15}

case "$set" in
controlplane)
	module="$root/hack/controlplane"
	binaries=(kube-apiserver kube-controller-manager etcd kubectl)
	packages=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl ./etcd)
	what="the control plane"
	;;
node)
	module="$root/hack/controlplane"
	binaries=(kube-scheduler kubelet kube-proxy)
	packages=(k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
	what="the node components"
	;;
coredns)
	module="$root/hack/coredns"
	binaries=(coredns)
	packages=(.)
	what="CoreDNS"
	cgo=0
	;;
netpol)
	module="$root/hack/netpol"
	binaries=(kube-network-policies)
	packages=(.)
	what="the NetworkPolicy engine"
	;;
*)
	echo "usage: $0 [controlplane|node|coredns|netpol]" >&2
	exit 2
	;;
esac

stamp=$( { go version; echo "$set cgo=$cgo"; cat "$0" "$module/go.mod" "$module/go.sum"; find "$module" -name '*.go' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -d' ' -f1)
stampfile="$out/.stamp-$set"

built=true
for b in "${binaries[@]}"; do
	[[ -x "$out/$b" ]] || built=false
done
if $built && [[ -f "$stampfile" ]] && [[ "$(cat "$stampfile")" == "$stamp" ]]; then
	exit 0
fi

ldflags=""
if [[ "$module" == "$root/hack/controlplane" ]]; then
	# The binaries report the pinned release as their version (kubectl
	# version, the API server's /version), as released builds do.
	release=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	minor=$(cut -d. -f2 <<<"$release")
	ldflags="-X k8s.io/component-base/version.gitVersion=$release -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
fi

mkdir -p "$out"
rm -f "$stampfile"
start=$(date +%s)
total=$(cd "$module" && go list -deps "${packages[@]}" | wc -l)
echo "Building $what into $out: $total packages (a first build takes several minutes; later ones are instant)" >&2

# go build -v names each package as it compiles it: count those lines for the
# progress line and pass everything else (compiler errors) through. pipefail
# makes a failed build fail the pipeline.
if ! (
	cd "$module"
	if [[ -n "$cgo" ]]; then
		export CGO_ENABLED=$cgo
	fi
	# One binary is named for what it is, not for its module's folder
	# (hack/netpol builds kube-network-policies).
	target="$out/"
	if ((${#binaries[@]} == 1)); then
		target="$out/${binaries[0]}"
	fi
	go build -v -trimpath -ldflags "$ldflags" -o "$target" "${packages[@]}" 2>&1
) | {
	done=0
	last=$start
	while IFS= read -r line; do
		if [[ "$line" =~ ^[A-Za-z0-9_.~/-]+$ ]]; then
			done=$((done + 1))
			now=$(date +%s)
			if ((now - last >= every)); then
				echo "  $what: $done of $total packages compiled, $((now - start))s elapsed" >&2
				last=$now
			fi
		else
			printf '%s\n' "$line" >&2
		fi
	done
}; then
	echo "Building $what failed after $(($(date +%s) - start))s" >&2
	exit 1
fi
echo "$stamp" >"$stampfile"
echo "Built $what in $(($(date +%s) - start))s" >&2
