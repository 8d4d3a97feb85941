#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kube-controller-manager and
# etcd) from the pinned Go modules in hack/controlplane into bin/controlplane.
# A version stamp of the pinned module files and the Go version decides whether
# a build is needed, so a second run is instant. Everything comes from the Go
# module proxy.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${CONTROLPLANE_BIN:-"$root/bin/controlplane"}
module="$root/hack/controlplane"
binaries=(kube-apiserver kube-controller-manager etcd)

stamp=$( { go version; cat "$module/go.mod" "$module/go.sum" "$module/etcd/main.go"; } | sha256sum | cut -d' ' -f1)

built=true
for b in "${binaries[@]}"; do
	[[ -x "$out/$b" ]] || built=false
done
if $built && [[ -f "$out/.stamp" ]] && [[ "$(cat "$out/.stamp")" == "$stamp" ]]; then
	exit 0
fi

echo "Building the control plane into $out (first build takes a few minutes)" >&2
mkdir -p "$out"
rm -f "$out/.stamp"
start=$(date +%s)
(
	cd "$module"
	go build -o "$out/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		./etcd
)
echo "$stamp" > "$out/.stamp"
echo "Control plane built in $(( $(date +%s) - start ))s" >&2
