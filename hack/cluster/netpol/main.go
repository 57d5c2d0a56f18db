// Command netpol enforces NetworkPolicies on the cluster of hack/cluster.sh, whose bridge CNI
// enforces none, with the policy evaluator of sigs.k8s.io/kube-network-policies: it judges the
// first packet of every new connection to a Pod, received on an nfqueue, against the policies
// and answers accept or drop.
//
// Upstream steers packets to the queue with its own nftables rules, which need the kernel's
// nft_queue expression; this machine's kernel lacks it (its table fails to load, logged at every
// sync) but has iptables' NFQUEUE target, so hack/cluster.sh installs the steering rule (new
// connections to the Pod network, from anywhere but the host itself). The evaluator reads every
// Pod and policy of the cluster, so one instance judges the connections to all nodes' Pods.
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
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	node := flag.String("node", "", "a node of the cluster (upstream's per-node bookkeeping needs one)")
	queue := flag.Int("nfqueue", 100, "the nfqueue the steering rule sends new connections to")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *node, *queue); err != nil {
		fmt.Fprintln(os.Stderr, "netpol:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, node string, queue int) error {
	if kubeconfig == "" || node == "" {
		return fmt.Errorf("--kubeconfig and --node are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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
	// NRI stays enabled although containerd 1.6 offers none: upstream v0.8.0 asks its NRI plugin
	// for every packet whose address the Pod informer does not know yet (a Pod that started a
	// moment ago), and with NRI disabled that plugin is nil and the evaluator panics (seen under
	// the soak's Pod churn). Enabled, the plugin exists, fails to reach a runtime, and answers
	// "unknown".
	c, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(), factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{QueueID: queue, NodeName: node, NFTableName: "kvcache-netpol", NRIdisabled: false})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return c.Run(ctx)
}
