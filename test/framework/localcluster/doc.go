// Package localcluster runs a real multi-node Kubernetes cluster on this
// machine, as kind does but without Docker: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler built from the pinned modules,
// N kubelets each on a containerd of its own, CNI bridge networking,
// kube-proxy in iptables mode, CoreDNS as the kube-dns Deployment and
// kube-network-policies on each node to enforce NetworkPolicy.
//
// Everything with an address lives in one network namespace that Up
// creates; the machine's own namespace gets nothing but a relay listening
// on 127.0.0.1, so the one kubeconfig works from inside and outside. Every
// daemon runs in a cgroup under one root of our own (per node, so a node can
// be killed as on power loss), and every action that changes the machine
// is written to a journal in the state directory before it is done, so
// Down undoes a bring-up that was killed halfway as well as a finished one,
// and nothing its journal does not name, so clusters side by side keep
// apart. What they share (global sysctls and directories) is in one record
// per machine: the first cluster up saves it, the last one down restores
// it.
//
// The decisions are pure functions, table-tested: addresses, ports and
// paths of a Config in layout.go, the daemons' configuration files and
// flags in render.go, what to undo and in which order in journal.go
// (PlanTeardown), and the shared record's joins and leaves in machine.go
// (MachineRecord). The I/O is in the files named after what they touch:
// host.go (the network namespace, sysctls and directories), machine.go
// (the machine's record, under a lock), cgroup.go, mount.go (mountinfo and
// unmounting), process.go (the daemons and their start times), pki.go (the
// certificates and kubeconfigs), packages.go (root, and the Debian packages
// the cluster needs, installed with debpkg when missing), relay.go (the
// loopback relay into the namespace), node.go (killing and restarting a
// node); up.go and down.go run the steps in order, and cluster.go is what
// callers hold (Load, clients, dialing into the namespace, importing
// images).
package localcluster
