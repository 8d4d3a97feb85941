package main

import (
	"flag"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func parseOptions(t *testing.T, args ...string) options {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("fleetd", flag.ContinueOnError)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRESTConfigThrottling(t *testing.T) {
	// A kubeconfig loaded by client-go leaves QPS and Burst at zero, which
	// client-go reads as 5 and 10.
	loaded := &rest.Config{Host: "https://127.0.0.1:6443"}

	o := parseOptions(t)
	cfg, err := o.restConfig(loaded)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 {
		t.Errorf("default qps=%v, want negative (no client-side throttling, as controller-runtime's own config loading)", cfg.QPS)
	}
	if loaded.QPS != 0 || loaded.Burst != 0 {
		t.Errorf("the loaded config was changed: qps=%v burst=%d", loaded.QPS, loaded.Burst)
	}

	o = parseOptions(t, "--kube-api-qps=30", "--kube-api-burst=7")
	if cfg, err = o.restConfig(loaded); err != nil || cfg.QPS != 30 || cfg.Burst != 7 {
		t.Errorf("flags: qps=%v burst=%d err=%v, want 30, 7", cfg.QPS, cfg.Burst, err)
	}

	o = parseOptions(t, "--kube-api-qps=0")
	if _, err := o.restConfig(loaded); err == nil || !strings.Contains(err.Error(), "--kube-api-qps=0") {
		t.Errorf("qps 0: err %v, want one naming the flag", err)
	}

	o = parseOptions(t, "--kube-api-burst=0")
	if _, err := o.restConfig(loaded); err == nil || !strings.Contains(err.Error(), "--kube-api-burst=0") {
		t.Errorf("burst 0: err %v, want one naming the flag", err)
	}
}
