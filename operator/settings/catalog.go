// Package settings owns the Setting catalog a release installs: the Settings the manager was
// given (--setting, the chart's values) are created when missing and take the release's value
// when an upgrade changes it (an edit in between stands), and a catalog Setting that does not
// exist yet reads as the release's value to everything the manager reads through Wrap or Reader.
package settings

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/vocab"
)

// AnnotationReleaseValue on a catalog Setting records the value the release last gave it. While
// the two agree, an edit of spec.value stands; when the release's value changes (an upgrade
// with another value), the new one replaces whatever spec.value holds.
const AnnotationReleaseValue = "kvcache.gpustack.ai/release-value"

// Parse reads `name=value` pairs (the manager's --setting flags) into the catalog the
// manager keeps, refusing a name outside the catalog or a value its validator refuses: a release
// whose values cannot become Settings fails at start, naming the value, rather than leaving the
// catalog silently incomplete.
func Parse(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--setting %q: want name=value", p)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--setting %s given twice", name)
		}
		s := &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}
		s.Default()
		if errs := validation.ValidateSetting(s); len(errs) > 0 {
			return nil, fmt.Errorf("--setting %s: %s", name, errs.ToAggregate().Error())
		}
		out[name] = value
	}
	return out, nil
}

// Catalog keeps the Setting catalog present with the release's values: a missing entry
// (a fresh install, or a user deleted it) is created, and a release value that changed replaces
// the previous one. The controller runs on the elected replica; every replica also creates the
// entries that are missing (createMissing), so an install has its catalog as soon as one
// replica serves the Setting webhook, without waiting for an election (up to a Lease duration
// when a previous manager's Lease is still there).
type Catalog struct {
	client client.Client
	// live reads the API server directly: at start the cache may not have synced.
	live   client.Reader
	values map[string]string
}

// New is the catalog of the release's Settings (name to value, as Parse reads them); nil when the
// manager was given none, which every method takes as no catalog.
func New(mgr ctrl.Manager, values map[string]string) *Catalog {
	if len(values) == 0 {
		return nil
	}
	return &Catalog{client: mgr.GetClient(), live: mgr.GetAPIReader(), values: values}
}

// createMissing runs on every replica: it creates each catalog entry that does not exist, at
// start and whenever a Setting is deleted, retrying until every one does. An entry never
// waits for an election (which takes up to a Lease duration after a previous manager's Lease).
// It never changes an existing Setting: that is the elected replica's, so replicas of two
// releases never take turns.
type createMissing struct {
	*Catalog
	informers cache.Informers // the manager's cache, which every replica starts
}

func (createMissing) NeedLeaderElection() bool { return false }

func (c createMissing) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("setting-catalog")
	deleted := make(chan struct{}, 1)
	inf, err := c.informers.GetInformer(ctx, &kvv1.Setting{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		select {
		case deleted <- struct{}{}:
		default:
		}
	}}); err != nil {
		return err
	}
	for {
		for pending := c.names(); len(pending) > 0; {
			pending = c.createAbsent(ctx, l, pending)
			if len(pending) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retryCatalog):
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deleted:
		}
	}
}

// createAbsent creates the named entries that do not exist and returns those it could not.
func (c createMissing) createAbsent(ctx context.Context, l logr.Logger, names []string) []string {
	var still []string
	for _, n := range names {
		err := c.live.Get(ctx, types.NamespacedName{Name: n}, &kvv1.Setting{})
		if apierrors.IsNotFound(err) {
			err = c.client.Create(ctx, c.desired(n))
			if err == nil {
				l.Info("created the Setting with the release's value", "setting", n, "value", c.values[n])
			} else if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
		if err != nil {
			still = append(still, n)
			l.V(1).Info("cannot create the Setting yet; retrying", "setting", n, "error", err.Error())
		}
	}
	return still
}

func (r *Catalog) names() []string {
	names := make([]string, 0, len(r.values))
	for n := range r.values {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// desired is the Setting as the release creates it.
func (r *Catalog) desired(name string) *kvv1.Setting {
	return &kvv1.Setting{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{vocab.LabelManagedBy: vocab.ManagedBy},
			Annotations: map[string]string{AnnotationReleaseValue: r.values[name]},
		},
		Spec: kvv1.SettingSpec{Value: r.values[name]},
	}
}

// retryCatalog is how soon a failed write is retried: at install the Setting webhook, served by
// the manager's own replicas, may not answer yet.
const retryCatalog = time.Second

// SetupWithManager registers the catalog's controller (on the elected replica) and the creation
// of missing entries (on every replica).
func (r *Catalog) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(createMissing{Catalog: r, informers: mgr.GetCache()}); err != nil {
		return err
	}
	names := r.names()
	inCatalog := predicate.NewPredicateFuncs(func(o client.Object) bool { _, ok := r.values[o.GetName()]; return ok })
	return ctrl.NewControllerManagedBy(mgr).
		Named("setting-catalog").
		For(&kvv1.Setting{}, builder.WithPredicates(inCatalog)).
		// An absent Setting sends no event: every entry is looked at once when the controller
		// starts, and again whenever its Setting changes or goes.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			for _, n := range names {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
			}
			return nil
		})).
		Complete(r)
}

// Reconcile creates one catalog Setting when it is missing, and gives it the release's value when
// the release changed that value since it last applied it.
func (r *Catalog) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	want, ok := r.values[req.Name]
	if !ok {
		return ctrl.Result{}, nil
	}
	l := log.FromContext(ctx)
	s := &kvv1.Setting{}
	err := r.client.Get(ctx, req.NamespacedName, s)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, r.desired(req.Name)); err != nil && !apierrors.IsAlreadyExists(err) {
			l.Info("cannot create the Setting yet; retrying", "setting", req.Name, "error", err.Error())
			return ctrl.Result{RequeueAfter: retryCatalog}, nil
		}
		l.Info("created the Setting with the release's value", "setting", req.Name, "value", want)
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	case !s.DeletionTimestamp.IsZero():
		return ctrl.Result{RequeueAfter: retryCatalog}, nil // recreated once it is gone
	case s.Annotations[AnnotationReleaseValue] == want:
		return ctrl.Result{}, nil // the release's value is applied; an edit since then stands
	}
	patch := client.MergeFrom(s.DeepCopy())
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationReleaseValue] = want
	prev := s.Spec.Value
	s.Spec.Value = want
	if err := r.client.Patch(ctx, s, patch); err != nil {
		l.Info("cannot apply the release's value to the Setting yet; retrying", "setting", req.Name, "error", err.Error())
		return ctrl.Result{RequeueAfter: retryCatalog}, nil
	}
	l.Info("the release changed the Setting's value", "setting", req.Name, "from", prev, "to", want)
	return ctrl.Result{}, nil
}

// get reads key into obj through r, except that a catalog Setting that does not exist reads as
// the release's value: the manager knows the catalog, so the moment between an install (or a
// user deleting an entry) and the Setting being there is not a state anyone reads differently.
func (r *Catalog) get(ctx context.Context, rd client.Reader, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := rd.Get(ctx, key, obj, opts...)
	s, isSetting := obj.(*kvv1.Setting)
	if !isSetting || !apierrors.IsNotFound(err) || key.Namespace != "" {
		return err
	}
	if _, ok := r.values[key.Name]; !ok {
		return err
	}
	r.desired(key.Name).DeepCopyInto(s)
	return nil
}

// catalogReader is a client.Reader whose Settings read as Catalog.get says.
type catalogReader struct {
	client.Reader
	catalog *Catalog
}

func (c catalogReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.catalog.get(ctx, c.Reader, key, obj, opts...)
}

// catalogClient is a client.Client whose Settings read as Catalog.get says.
type catalogClient struct {
	client.Client
	catalog *Catalog
}

func (c catalogClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.catalog.get(ctx, c.Client, key, obj, opts...)
}

// Wrap wraps a client the controllers read through so that a missing catalog Setting reads as the
// release's value; without a catalog it returns the client unchanged.
func (r *Catalog) Wrap(c client.Client) client.Client {
	if r == nil {
		return c
	}
	return catalogClient{Client: c, catalog: r}
}

// Reader is Wrap for a reader (the webhooks' cached and live reads).
func (r *Catalog) Reader(rd client.Reader) client.Reader {
	if r == nil {
		return rd
	}
	return catalogReader{Reader: rd, catalog: r}
}
