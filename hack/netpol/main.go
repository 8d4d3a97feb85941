// Command kube-network-policies enforces NetworkPolicy on one node of the
// local cluster, as kind does: the controller of the pinned
// sigs.k8s.io/kube-network-policies, which queues the first packet of each
// connection to or from a Pod that a policy selects (nftables and
// NFQUEUE) and drops what the policies do not allow. It runs as a daemon of
// the cluster, not as a Pod, so it reads a kubeconfig where the upstream
// command reads the in-cluster one. Several run in one network namespace,
// one per node, each with its own nftables table and queue.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kube-network-policies:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with")
	node := flag.String("hostname-override", "", "the Node whose Pods this instance enforces policies for")
	queue := flag.Int("nfqueue-id", 100, "the NFQUEUE number, one per instance in a network namespace")
	table := flag.String("nftables-table", "kube-network-policies", "the nftables table, one per instance in a network namespace")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" {
		return fmt.Errorf("--kubeconfig and --hostname-override are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			QueueID:     *queue,
			NodeName:    *node,
			NFTableName: *table,
			// The pod addresses come from the API server: no NRI socket
			// on these containerds.
			NRIdisabled: true,
			// Fail closed: with the controller down, queued packets drop.
			FailOpen:            false,
			NetfilterBug1766Fix: true,
		})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return ctrl.Run(ctx)
}
