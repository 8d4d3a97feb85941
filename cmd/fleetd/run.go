package main

import (
	"flag"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// run is `fleetd`: controllers and gateway against the cluster in
// --kubeconfig, KUBECONFIG, the in-cluster config or ~/.kube/config.
func run(args []string) error {
	fs := flag.NewFlagSet("fleetd", flag.ExitOnError)
	var o options
	o.bind(fs)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig (default: KUBECONFIG, in-cluster, or ~/.kube/config).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = config.GetConfig()
	}
	if err != nil {
		return err
	}
	return start(ctrl.SetupSignalHandler(), cfg, o)
}
