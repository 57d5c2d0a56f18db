package main

import (
	"flag"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
)

func newManagerCommand() *cobra.Command {
	o := manager.Options{}
	var kubeconfig string
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the operator: admission webhooks on every replica, controllers on the elected one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			var cfg *rest.Config
			var err error
			if kubeconfig != "" {
				cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			} else {
				cfg, err = ctrl.GetConfig()
			}
			if err != nil {
				return usageErrorf("no cluster to talk to: %v (in a Pod the service account is used; outside, pass --kubeconfig)", err)
			}
			mgr, err := manager.New(cfg, o)
			if err != nil {
				return err
			}
			return mgr.Start(ctrl.SetupSignalHandler())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.SystemNamespace, "system-namespace", generator.DefaultSystemNamespace, "namespace managed stores run in; the election Lease lives there too")
	f.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the admission webhook server listens on")
	f.StringVar(&o.CertDir, "cert-dir", "", "directory holding tls.crt and tls.key for the webhook server (reloaded when they change); default: the system temp dir's k8s-webhook-server/serving-certs")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to (\"0\" disables it)")
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address /healthz and /readyz bind to")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "elect one replica to run the controllers (webhooks serve on every replica)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for out-of-cluster runs")
	// zap registers Go flags (--zap-log-level, --zap-encoder, ...); structured JSON by default.
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return cmd
}
