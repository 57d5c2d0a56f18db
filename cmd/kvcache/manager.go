package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/settings"
)

func newManagerCommand() *cobra.Command {
	o := manager.Options{}
	var kubeconfig, certMode string
	var pairs []string
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the operator: admission webhooks on every replica, controllers on the elected one",
		Example: `  # As the chart runs it (helm install sets these from its values)
  kvcache manager --leader-elect --namespace kvcache-system --system-namespace gpustack-system \
    --cert-mode self --cert-secret-name kvcache-webhook-cert --webhook-service kvcache-webhook \
    --webhook-config-name kvcache`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			var cfg *rest.Config
			var err error
			if kubeconfig != "" {
				cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
				// As controller-runtime does for its own config: no client-side rate limit (the
				// API server's priority and fairness applies), rather than client-go's 5 QPS.
				if err == nil && cfg.QPS == 0 {
					cfg.QPS = -1
				}
			} else {
				cfg, err = ctrl.GetConfig()
			}
			if err != nil {
				return usageErrorf("no cluster to talk to: %v (in a Pod the service account is used; outside, pass --kubeconfig)", err)
			}
			o.CertSecret.Namespace = o.Namespace
			switch certMode {
			case "self":
				o.SelfSignedCerts = true
				if o.CertSecret.Namespace == "" || o.CertSecret.Name == "" || o.WebhookService == "" || o.WebhookConfigName == "" {
					return usageErrorf("--cert-mode self needs --cert-secret-name, --namespace (or POD_NAMESPACE), --webhook-service and --webhook-config-name")
				}
			case "external":
			default:
				return usageErrorf("--cert-mode %q: use self (the manager makes and rotates its certificate) or external (certificates in --cert-dir come from elsewhere)", certMode)
			}
			if o.Settings, err = settings.Parse(pairs); err != nil {
				return usageErrorf("%v", err)
			}
			if o.HitRateWindow < time.Minute || o.HitRateWindow > time.Hour {
				return usageErrorf("--hit-rate-window %s: use a window from 1m to 1h", o.HitRateWindow)
			}
			if o.EngineScrapeInterval < time.Second || o.EngineScrapeInterval > o.HitRateWindow/2 {
				return usageErrorf("--engine-scrape-interval %s: use at least 1s and at most half of --hit-rate-window (%s)", o.EngineScrapeInterval, o.HitRateWindow)
			}
			ctx := ctrl.SetupSignalHandler()
			if err := manager.WaitForAPIServer(ctx, cfg, ctrl.Log.WithName("setup"), time.Second); err != nil {
				return fmt.Errorf("stopped while waiting for the API server: %w", err)
			}
			mgr, err := manager.New(cfg, o)
			if err != nil {
				return err
			}
			return mgr.Start(ctx)
		},
	}
	f := cmd.Flags()
	f.Var(newNamespaceFlag(&o.SystemNamespace, generator.DefaultSystemNamespace), "system-namespace", "namespace managed stores run in; the election Lease lives there too")
	f.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the admission webhook server listens on")
	f.StringVar(&o.CertDir, "cert-dir", "", "directory holding tls.crt and tls.key for the webhook server (reloaded when they change); default: the system temp dir's k8s-webhook-server/serving-certs")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to (\"0\" disables it)")
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address /healthz and /readyz bind to")
	f.StringVar(&o.OperatorImage, "operator-image", defaultOperatorImage(), "the manager's own image: electing leader Pods copy the store launcher (kvcache elect) out of it, member Pods their preStop drain (kvcache drain-member) (the chart sets it)")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "elect one replica to run the controllers (webhooks serve on every replica)")
	f.DurationVar(&o.HitRateWindow, "hit-rate-window", operator.DefaultHitRateWindow, "how far back a Binding's and a ModelDeployment's status.storeHits reach (the prompt tokens their engines were asked and how many the store served, from the engines' own counters); at most 1h")
	f.DurationVar(&o.EngineScrapeInterval, "engine-scrape-interval", operator.DefaultEngineScrapeInterval, "the least time between two reads of one engine Pod's /metrics")
	f.DurationVar(&o.CacheInUseWindow, "cache-in-use-window", operator.DefaultCacheInUseWindow, "how long Pods that use a Binding may be Ready with no write under its tenant before its CacheInUse condition (and a ModelDeployment's CacheAttached) turns False; also how long EvictingOwnObjects stays True after the last eviction")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for out-of-cluster runs")
	f.StringVar(&certMode, "cert-mode", "external", "self: create and rotate the webhook CA and serving certificate in --cert-secret-name and keep the webhook configurations' caBundle current; external: certificates in --cert-dir come from elsewhere (cert-manager, a Secret) and are reloaded when they change")
	f.StringVar(&o.CertSecret.Name, "cert-secret-name", "", "Secret holding the self-managed webhook certificate (--cert-mode self)")
	f.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the manager's own namespace: its webhook certificate's, and the one the stores' NetworkPolicies admit its Pods from (default: $POD_NAMESPACE)")
	f.Var(newPeersValue(&o.MetricsFrom), metricsFromFlag, metricsFromUsage)
	f.StringVar(&o.WebhookService, "webhook-service", "", "Service in front of the webhook server; the certificate is issued for it (--cert-mode self)")
	f.StringSliceVar(&o.ExtraCertDNSNames, "cert-dns-names", nil, "extra DNS names for the self-managed certificate, beside the webhook Service's (--cert-mode self)")
	f.StringVar(&o.WebhookConfigName, "webhook-config-name", "", "name of the Mutating- and ValidatingWebhookConfiguration whose caBundle the manager keeps current (--cert-mode self)")
	f.StringArrayVar(&pairs, "setting", nil, "name=value of a Setting in the catalog (repeatable; the chart passes its values): every replica creates the Setting when it is missing, the elected one applies the value when the release changes it (an edit of the Setting stands until then), and until the Setting exists it reads as this value")
	// zap registers Go flags (--zap-log-level, --zap-encoder, ...); structured JSON by default.
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	cmd.AddCommand(newUninstallCheckCommand())
	return cmd
}

// newUninstallCheckCommand is the chart's pre-delete hook: it refuses the uninstall while
// objects exist whose finalizers only the running operator releases.
func newUninstallCheckCommand() *cobra.Command {
	var kubeconfig string
	var wait time.Duration
	var release string
	var revision int
	cmd := &cobra.Command{
		Use:   "uninstall-check",
		Short: "Exit 1, naming them, while ModelDeployments, KVCachePoolBindings, KVCachePools or KVCacheBackends exist (the chart's pre-delete hook)",
		Long: `uninstall-check lists every ModelDeployment, KVCachePoolBinding, KVCachePool and KVCacheBackend.
When none exists it exits 0; objects already being deleted are waited for (--wait), since the
operator is still running to finish them; otherwise it exits 1 naming each one and how to delete
them. The chart runs it as a pre-delete hook, so helm uninstall never strands objects on
finalizers nobody releases.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			scheme, err := generator.NewScheme()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return usageErrorf("API client: %v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := manager.CheckUninstall(ctx, c, wait, release, revision, cmd.OutOrStdout()); err != nil {
				return invalidErrorf("%v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for out-of-cluster runs; in a Pod the service account is used")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for objects that are already being deleted")
	cmd.Flags().StringVar(&release, "release", "", "the Helm release (namespace/name) the refusal names for helm rollback")
	cmd.Flags().IntVar(&revision, "revision", 0, "the release's current revision, the one helm rollback restores")
	return cmd
}
