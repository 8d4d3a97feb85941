#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kube-controller-manager,
# etcd, and the kubectl of the same release that the tests and the README
# use) from the pinned Go modules in hack/controlplane into bin/controlplane.
# A version stamp of the pinned module files and the Go version decides whether
# a build is needed, so a second run is instant. Everything comes from the Go
# module proxy.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${CONTROLPLANE_BIN:-"$root/bin/controlplane"}
module="$root/hack/controlplane"
binaries=(kube-apiserver kube-controller-manager etcd kubectl)

stamp=$( { go version; cat "$0" "$module/go.mod" "$module/go.sum" "$module/etcd/main.go"; } | sha256sum | cut -d' ' -f1)
# The binaries report the pinned release as their version (kubectl version,
# the API server's /version), as released builds do.
release=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(cut -d. -f2 <<<"$release")
ldflags="-X k8s.io/component-base/version.gitVersion=$release -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"

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
	go build -ldflags "$ldflags" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl \
		./etcd
)
echo "$stamp" > "$out/.stamp"
echo "Control plane built in $(( $(date +%s) - start ))s" >&2
