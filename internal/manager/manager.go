// Package manager assembles the kvcache-operator process: one controller-runtime manager that
// serves the admission webhooks on every replica and runs the controllers on the elected one.
// `kvcache manager` and the integration suites build it the same way.
package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/backend"
	"github.com/kvcache-operator/kvcache/operator/binding"
	"github.com/kvcache-operator/kvcache/operator/members"
	"github.com/kvcache-operator/kvcache/operator/modeldeployment"
	"github.com/kvcache-operator/kvcache/operator/policyprobe"
	"github.com/kvcache-operator/kvcache/operator/pool"
	"github.com/kvcache-operator/kvcache/operator/settings"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
	"github.com/kvcache-operator/kvcache/webhook"
)

// Webhook paths the configurations in templates/webhooks point at.
const (
	PathPodInject = "/mutate-v1-pod"
	PathPodFreeze = "/validate-v1-pod"
)

// Options configure the process. Zero values take the defaults of the `kvcache manager` flags.
type Options struct {
	// SystemNamespace is where managed stores run and the manager's election Lease lives.
	SystemNamespace string
	// Namespace is the manager's own namespace (the chart's POD_NAMESPACE): the stores'
	// NetworkPolicies admit its Pods from there. "" renders the chart's default.
	Namespace string
	// MetricsFrom are the peers the stores' NetworkPolicies admit to scrape the masters (the
	// chart's networkPolicy.metricsFrom).
	MetricsFrom []networkingv1.NetworkPolicyPeer
	// WebhookHost/WebhookPort/CertDir configure the webhook server; certificates in CertDir are
	// reloaded when they change.
	WebhookHost string
	WebhookPort int
	CertDir     string
	// MetricsBindAddress ("0" disables) and HealthProbeBindAddress ("0" disables).
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// LeaderElect elects one replica to run the controllers; webhooks serve on every replica.
	LeaderElect bool
	// OperatorImage is the manager's own image, which electing leader Pods copy the store
	// launcher from, and member Pods their preStop drain; "" renders values' default (the
	// chart's).
	OperatorImage string
	// DisableControllers serves the webhooks alone (webhook test suites; a webhook-only
	// deployment). DisableWebhooks runs the controllers alone (controller test suites).
	DisableControllers bool
	DisableWebhooks    bool
	// AdminAddress, when set, overrides a backend's admin host:port ("" keeps the derived one).
	// Tests point it at a store on loopback; a cluster never needs it.
	AdminAddress func(b *kvv1.KVCacheBackend) string
	// PollInterval of the store observations; the controllers' default when zero.
	PollInterval time.Duration
	// CacheInUseWindow is how long Pods that use a Binding must have been Ready with no write
	// under its tenant before CacheInUse (and a ModelDeployment's CacheAttached) is False;
	// operator.DefaultCacheInUseWindow when zero.
	CacheInUseWindow time.Duration
	// HitRateWindow is how far back a Binding's and a ModelDeployment's status.storeHits
	// reach; operator.DefaultHitRateWindow when zero.
	HitRateWindow time.Duration
	// EngineScrapeInterval is the least time between two reads of one engine Pod's counters;
	// operator.DefaultEngineScrapeInterval when zero.
	EngineScrapeInterval time.Duration
	// Settings is the Setting catalog with the release's values (settings.Parse): every replica
	// creates the entries missing at its start, and the elected one keeps them (recreates a
	// deleted one, applies a value the release changed); until an entry exists, the webhooks
	// and controllers read it as the release's value. Empty: the catalog is left to others.
	Settings map[string]string

	// SelfSignedCerts makes the manager create and rotate its own CA and serving certificate in
	// the Secret CertSecret (through open-policy-agent/cert-controller) and keep the caBundle of
	// the webhook configurations named WebhookConfigName current. Every replica serves the
	// certificate straight from the Secret, as soon as it is there, and writes a copy into
	// CertDir (which must be writable). Without it the certificates in CertDir come from
	// elsewhere (cert-manager, a user's Secret) and are reloaded on change.
	SelfSignedCerts bool
	CertSecret      types.NamespacedName
	// ExtraCertDNSNames are added to the self-signed certificate (tests reach the server as
	// localhost).
	ExtraCertDNSNames []string
	WebhookService    string
	WebhookConfigName string
}

// New builds the manager with every webhook registered. Call Start on the result.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.SystemNamespace == "" {
		o.SystemNamespace = generator.DefaultSystemNamespace
	}
	if o.WebhookPort == 0 {
		o.WebhookPort = 9443
	}
	scheme, err := generator.NewScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrlmanager.Options{
		Scheme:                  scheme,
		Cache:                   cacheOptions(o.SystemNamespace),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "kvcache-operator",
		LeaderElectionNamespace: o.SystemNamespace,
		// A stopping manager gives the Lease up, so the next replica (or the next install)
		// takes over at once instead of waiting out the Lease duration. Safe because Start
		// returns only once every runnable stopped, and `kvcache manager` exits right after.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir,
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	// One renderer for the process: the templates are parsed once, and the webhooks and the
	// controllers render with the same parse.
	r, err := generator.NewRenderer()
	if err != nil {
		return nil, err
	}
	// The admission rules and the controllers both list a backend's Bindings pool by pool.
	if err := objects.IndexBindingsByPool(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	if !o.DisableWebhooks {
		if err := setupWebhooks(mgr, o, r); err != nil {
			return nil, err
		}
	}
	if !o.DisableControllers {
		if err := registerControllers(mgr, o, r); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// setupWebhooks registers the webhooks on every replica (the webhook server is not a
// leader-elected runnable), and a readiness check that passes only once the server serves with
// a certificate: a replica that cannot answer admission must not receive it. With a
// self-managed certificate the server reads it from its Secret as soon as the rotator writes it
// (servingCert), not from the mounted copy the kubelet refreshes much later.
func setupWebhooks(mgr ctrl.Manager, o Options, r *generator.Renderer) error {
	var certs *servingCert
	var caInjected chan struct{}
	if o.SelfSignedCerts {
		if o.CertDir == "" {
			o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs") // the server's default
		}
		caInjected = make(chan struct{})
		if err := rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      o.CertSecret,
			CertDir:        o.CertDir,
			CAName:         "kvcache-operator-ca",
			CAOrganization: "kvcache-operator",
			DNSName:        fmt.Sprintf("%s.%s.svc", o.WebhookService, o.CertSecret.Namespace),
			ExtraDNSNames: append([]string{o.WebhookService, fmt.Sprintf("%s.%s", o.WebhookService, o.CertSecret.Namespace),
				fmt.Sprintf("%s.%s.svc.cluster.local", o.WebhookService, o.CertSecret.Namespace)}, o.ExtraCertDNSNames...),
			// Closed once the webhook configurations carry the CA: until then the API server
			// would refuse the certificate this replica serves.
			IsReady:    caInjected,
			Webhooks:   []rotator.WebhookInfo{{Name: o.WebhookConfigName, Type: rotator.Mutating}, {Name: o.WebhookConfigName, Type: rotator.Validating}},
			FieldOwner: operator.FieldManager,
			// Every replica serves webhooks, so every replica needs the certificate; the
			// rotation itself is idempotent across replicas.
			RequireLeaderElection: false,
		}); err != nil {
			return fmt.Errorf("set up certificate rotation: %w", err)
		}
		certs = newServingCert(mgr.GetConfig(), mgr.GetScheme(), o.CertSecret, o.CertDir)
		if err := mgr.Add(certs); err != nil {
			return err
		}
		// The server New built has not started: its TLS configuration is completed here.
		srv, ok := mgr.GetWebhookServer().(*ctrlwebhook.DefaultServer)
		if !ok {
			return fmt.Errorf("self-managed certificates need controller-runtime's default webhook server, have %T", mgr.GetWebhookServer())
		}
		srv.Options.TLSOpts = append(srv.Options.TLSOpts, func(c *tls.Config) { c.GetCertificate = certs.GetCertificate })
	}
	if err := registerWebhooks(mgr, r, settings.New(mgr, o.Settings)); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		if certs != nil {
			if err := certs.Ready(); err != nil {
				return err
			}
			select {
			case <-caInjected:
			default:
				return fmt.Errorf("the webhook configurations do not carry the CA yet")
			}
		}
		return mgr.GetWebhookServer().StartedChecker()(req)
	})
}

func registerWebhooks(mgr ctrl.Manager, r *generator.Renderer, cat *settings.Catalog) error {
	m, err := webhook.NewMetrics(metrics.Registry)
	if err != nil {
		return err
	}

	decoder := admission.NewDecoder(mgr.GetScheme())
	// Every admission reads the manager's cache first and the API server only on a miss.
	reader := objects.Cluster{Cached: cat.Reader(mgr.GetClient()), Live: cat.Reader(mgr.GetAPIReader())}
	srv := mgr.GetWebhookServer()
	srv.Register(PathPodInject, &admission.Webhook{Handler: m.Instrument("pod-inject", webhook.NewPodMutator(injection.New(r), reader))})
	srv.Register(PathPodFreeze, &admission.Webhook{Handler: m.Instrument("pod-freeze", webhook.NewPodFreeze(decoder))})

	s := mgr.GetScheme()
	for kind, wh := range map[string]*admission.Webhook{
		"kvcachebackend":     admission.WithValidator[*kvv1.KVCacheBackend](s, &webhook.BackendValidator{Reader: reader, Renderer: r}),
		"kvcachepool":        admission.WithValidator[*kvv1.KVCachePool](s, &webhook.PoolValidator{Reader: reader}),
		"kvcachepoolbinding": admission.WithValidator[*kvv1.KVCachePoolBinding](s, &webhook.BindingValidator{Reader: reader}),
		"modeldeployment":    admission.WithValidator[*kvv1.ModelDeployment](s, &webhook.ModelDeploymentValidator{Reader: reader}),
		"setting":            admission.WithValidator[*kvv1.Setting](s, &webhook.SettingValidator{}),
	} {
		wh.Handler = m.Instrument(kind, webhook.Validated{Handler: wh.Handler})
		srv.Register(ValidatePath(kind), wh)
	}
	return nil
}

// ValidatePath is where the validator of a kind (lowercase) is served; the paths follow
// controller-runtime's convention and templates/webhooks names the same ones.
func ValidatePath(kind string) string {
	return "/validate-" + strings.ReplaceAll(kvv1.GroupVersion.Group, ".", "-") + "-" + kvv1.GroupVersion.Version + "-" + kind
}

// cacheOptions keep the manager's cache to what it needs: the store's Pods and Leases in the
// system namespace, the opted-in Pods everywhere else (their injection records name the
// Bindings whose tenants they use), and only the children the operator manages. Other Pods and
// workloads are never cached, so memory does not grow with the cluster. The Pods rendered for
// ModelDeployments carry another label, and one selector cannot say "either label": they have
// their own cache (deploymentPodCache).
func cacheOptions(systemNamespace string) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{vocab.LabelManagedBy: vocab.ManagedBy})
	store := labels.SelectorFromSet(labels.Set{vocab.LabelName: vocab.StoreName})
	injected := labels.SelectorFromSet(labels.Set{vocab.LabelInject: "true"})
	inSystem := map[string]cache.Config{systemNamespace: {}}
	return cache.Options{
		// managedFields are never read here: not caching them saves memory and every copy.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			// One informer per entry: the system namespace's by the store's label, every other
			// namespace's by the opt-in label.
			&corev1.Pod{}: {Namespaces: map[string]cache.Config{
				systemNamespace:     {LabelSelector: store},
				cache.AllNamespaces: {LabelSelector: injected},
			}},
			&coordinationv1.Lease{}:  {Namespaces: inSystem},
			&appsv1.Deployment{}:     {Label: managed},
			&appsv1.DaemonSet{}:      {Label: managed},
			&corev1.Service{}:        {Label: managed},
			&corev1.ConfigMap{}:      {Label: managed},
			&corev1.ServiceAccount{}: {Label: managed},
			&rbacv1.Role{}:           {Label: managed},
			&rbacv1.RoleBinding{}:    {Label: managed},
			// Only the stores' own, which live in the system namespace alone.
			&networkingv1.NetworkPolicy{}: {Namespaces: inSystem, Label: managed},
		}}
}

// deploymentPodCache is a cache of the Pods rendered for ModelDeployments alone (those carrying
// the ModelDeployment label, in every namespace).
func deploymentPodCache(mgr ctrl.Manager) (cache.Cache, error) {
	rendered, err := labels.NewRequirement(vocab.LabelModelDeployment, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	return cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject:         map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*rendered)}},
	})
}

// startedWithCaches makes the manager start a cache with its own and wait for it to sync before
// any controller runs (the manager does so for what has a GetCache method).
type startedWithCaches struct{ cache.Cache }

func (c startedWithCaches) GetCache() cache.Cache { return c.Cache }

func registerControllers(mgr ctrl.Manager, o Options, r *generator.Renderer) error {
	m, err := operator.NewMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	d := r.Defaults()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	admin := func(b *kvv1.KVCacheBackend) store.Admin {
		addr := ""
		if o.AdminAddress != nil {
			addr = o.AdminAddress(b)
		}
		if addr == "" {
			addr = backend.AdminAddress(b, o.SystemNamespace, d)
		}
		if addr == "" {
			return nil
		}
		return store.New("http://"+addr, store.WithTransport(transport))
	}
	if err := operator.IndexPodsByInjectedBinding(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	rendered, err := deploymentPodCache(mgr)
	if err != nil {
		return err
	}
	if err := mgr.Add(startedWithCaches{rendered}); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("kvcache-operator")
	// The writes seen per tenant: recorded by the Binding controller, read by the
	// ModelDeployment controller for its own Pods.
	activity := &operator.TenantActivity{}
	// The engines' own counters, read from their Pods: shared by the Binding and
	// ModelDeployment controllers, so a Pod both report on is read once per interval.
	engineReader := &operator.EngineReader{Interval: o.EngineScrapeInterval}
	// One view of each master's ledger for the pool and Binding controllers: read once per
	// poll whichever asks first, dropped after each of their writes. The backend reconciler
	// hands it each read of a master's /metrics, so that is read once per poll for all three.
	poll := o.PollInterval
	if poll == 0 {
		poll = pool.DefaultPollInterval
	}
	view := &storeview.View{MaxAge: poll, Metrics: m}
	cat := settings.New(mgr, o.Settings)
	if err := (&backend.Reconciler{
		Client: cat.Wrap(mgr.GetClient()), APIReader: mgr.GetAPIReader(), Renderer: r, SystemNamespace: o.SystemNamespace, OperatorImage: o.OperatorImage,
		OperatorNamespace: o.Namespace, MetricsFrom: o.MetricsFrom, Admin: admin, View: view, Recorder: recorder, Metrics: m, PollInterval: o.PollInterval,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&members.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SystemNamespace: o.SystemNamespace, Admin: admin, Recorder: recorder, Metrics: m,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&policyprobe.Reconciler{
		Client: mgr.GetClient(), SystemNamespace: o.SystemNamespace, RPCPort: r.Defaults().Store.RPCPort,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	pools := &pool.Reconciler{Client: mgr.GetClient(), Admin: admin, View: view, Recorder: recorder, Metrics: m, PollInterval: o.PollInterval}
	if err := pools.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&binding.Reconciler{
		Client: mgr.GetClient(), Admin: admin, View: view, Recorder: recorder, Metrics: m, PollInterval: o.PollInterval,
		Pods: mgr.GetClient(), DeploymentPods: rendered, Injector: injection.New(r), Activity: activity,
		CacheInUseWindow: o.CacheInUseWindow, WakePool: pools.Wake, Engines: engineReader, HitRateWindow: o.HitRateWindow,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if cat != nil {
		if err := cat.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return (&modeldeployment.Reconciler{
		Client: cat.Wrap(mgr.GetClient()), APIReader: mgr.GetAPIReader(), Renderer: r, Pods: rendered, Activity: activity,
		CacheInUseWindow: o.CacheInUseWindow, Engines: engineReader, HitRateWindow: o.HitRateWindow,
	}).SetupWithManager(mgr)
}
