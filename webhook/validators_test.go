package webhook

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// Fixtures: the walkthrough's objects (backend mooncake-dram, pool shared-dram, Binding
// team-a/team-a, ModelDeployment team-a/qwen-chat) and the chart's Settings. Each returns a fresh
// object the test may change; none is defaulted, as a manifest would not be.

func vtReplicas(b *kvv1.KVCacheBackend, n int32) *kvv1.KVCacheBackend {
	b.Spec.Connection.Managed.Leader.Replicas = ptr.To(n)
	return b
}

func vtBackend(name string, protocols ...kvv1.TransportProtocol) *kvv1.KVCacheBackend {
	b := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: name}}
	m := &kvv1.ManagedConnection{}
	if len(protocols) == 0 {
		protocols = []kvv1.TransportProtocol{""}
	}
	for i, p := range protocols {
		g := kvv1.MemberGroup{
			NodeSelector:      map[string]string{"pool": string(rune('a' + i))},
			CapacityPerMember: resource.MustParse("8Gi"),
		}
		if p != "" {
			g.Transport = &kvv1.Transport{Protocol: p}
		}
		m.Members = append(m.Members, g)
	}
	b.Spec.Connection.Managed = m
	return b
}

// vtNoLedger is a managed backend with multi-tenancy off.
func vtNoLedger(name string) *kvv1.KVCacheBackend {
	b := vtBackend(name)
	b.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false)
	return b
}

// vtWarm is a backend with warm failover (electionBackend: Etcd, no ledger).
func vtWarm(name string) *kvv1.KVCacheBackend {
	b := vtNoLedger(name)
	b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionEtcd
	b.Spec.Connection.Managed.Leader.Etcd = &kvv1.StoreEtcd{Endpoints: []string{"store-etcd.gpustack-system.svc:2379"}}
	return b
}

func vtPool(name, backend string) *kvv1.KVCachePool {
	return &kvv1.KVCachePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kvv1.KVCachePoolSpec{
			Backends: []string{backend},
			Quota:    kvv1.PoolQuota{Total: resource.MustParse("16Gi")},
		},
	}
}

func vtBinding(namespace, name, pool, domain string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: pool},
			Quota:   kvv1.BindingQuota{Ceiling: resource.MustParse("8Gi")},
			Domain:  kvv1.Domain{Name: domain, BlockSize: 64, Dtype: "bfloat16"},
		},
	}
}

func vtSetting(name, value string) *kvv1.Setting {
	return &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}
}

func vtImageSetting() *kvv1.Setting {
	return vtSetting(kvv1.SettingKVCacheBackendImage, kvv1.DefaultKVCacheBackendImage)
}

func vtInstanceType(name, manufacturer string) *kvv1.InstanceType {
	return &kvv1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kvv1.InstanceTypeSpec{Accelerator: &kvv1.Accelerator{
			ResourceName: "huawei.com/Ascend910", Manufacturer: manufacturer,
		}},
	}
}

func vtDeployment() *kvv1.ModelDeployment {
	return &kvv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "qwen-chat"},
		Spec: kvv1.ModelDeploymentSpec{
			Model:   kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"},
			Engine:  kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			KVCache: &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "team-a"}},
			Roles:   []kvv1.Role{{Name: "server"}},
		},
	}
}

// vtWalkthrough is the cluster after the walkthrough's Steps 1 and 2, with the chart's Setting.
func vtWalkthrough() []client.Object {
	return []client.Object{
		vtImageSetting(),
		vtBackend("mooncake-dram"),
		vtPool("shared-dram", "mooncake-dram"),
		vtBinding("team-a", "team-a", "shared-dram", ""),
	}
}

// vtDeleting marks obj as being deleted (a finalizer holds it, as the fake client requires).
func vtDeleting[T client.Object](obj T) T {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	obj.SetDeletionTimestamp(&now)
	obj.SetFinalizers([]string{"kvcache.gpustack.ai/finalizer"})
	return obj
}

// vtReader is a fake API server holding objs.
func vtReader(t *testing.T, objs ...client.Object) objects.Reader {
	t.Helper()
	s, err := generator.NewScheme()
	require.NoError(t, err)
	return objects.Cluster{Cached: fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithIndex(&kvv1.KVCachePoolBinding{}, objects.BindingPoolField, func(o client.Object) []string {
		return []string{o.(*kvv1.KVCachePoolBinding).Spec.PoolRef.Name}
	}).Build()}
}

// vtFailingReader fails every read of a T with a server timeout.
func vtFailingReader[T client.Object](t *testing.T, objs ...client.Object) objects.Reader {
	t.Helper()
	s, err := generator.NewScheme()
	require.NoError(t, err)
	boom := apierrors.NewServerTimeout(kvv1.GroupVersion.WithResource("x").GroupResource(), "get", 1)
	return objects.Cluster{Cached: interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(T); ok {
				return boom
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})}
}

// vtCase is one admission in a validator's table: a create of obj, or (old set) an update of
// old changed by mutate; want lists the refusal's causes, warn the warnings.
type vtCase[T client.Object] struct {
	name    string
	cluster []client.Object
	old     T
	obj     T
	mutate  func(T)
	want    []string
	warn    admission.Warnings
}

// runVTCases admits each case through a validator reading the case's cluster.
func runVTCases[T client.Object](t *testing.T, cases []vtCase[T], validator func(objects.Reader) admission.Validator[T]) {
	t.Helper()
	var none T
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			v := validator(vtReader(t, tt.cluster...))
			var warnings admission.Warnings
			var err error
			if any(tt.old) == any(none) {
				warnings, err = v.ValidateCreate(context.Background(), tt.obj)
			} else {
				changed := tt.old.DeepCopyObject().(T)
				tt.mutate(changed)
				warnings, err = v.ValidateUpdate(context.Background(), tt.old, changed)
			}
			if len(tt.warn) == 0 {
				assert.Empty(t, warnings)
			} else {
				assert.Equal(t, tt.warn, warnings)
			}
			assert.Equal(t, tt.want, vtCauses(t, err))
			if any(tt.old) == any(none) {
				cliVerdict(t, tt.cluster, nil, tt.obj, tt.want, tt.warn)
			} else {
				changed := tt.old.DeepCopyObject().(T)
				tt.mutate(changed)
				cliVerdict(t, tt.cluster, tt.old, changed, tt.want, tt.warn)
			}
		})
	}
}

// cliVerdict judges obj the way the CLI does and requires the webhook's verdict: the same
// causes and warnings. A create (old nil) is judged as `kvcache render` judges it, with the
// case's cluster as the files beside obj; an update as `kvcache check -f` judges a manifest of
// an object its --cluster files hold (old, with the case's cluster).
func cliVerdict(t *testing.T, cluster []client.Object, old, obj client.Object, want []string, warn admission.Warnings) {
	t.Helper()
	kind, name := "", obj.GetName()
	if obj.GetNamespace() != "" {
		name = obj.GetNamespace() + "/" + name
	}
	same := func(o client.Object) bool {
		return reflect.TypeOf(o) == reflect.TypeOf(obj) && o.GetNamespace() == obj.GetNamespace() && o.GetName() == obj.GetName()
	}
	sets := func(objs []client.Object) (objects.Set, []kvv1.ModelDeployment) {
		var f objects.Set
		var models []kvv1.ModelDeployment
		for _, o := range objs {
			switch x := o.(type) {
			case *kvv1.Setting:
				f.Settings = append(f.Settings, *x)
			case *kvv1.KVCacheBackend:
				f.Backends = append(f.Backends, *x)
			case *kvv1.KVCachePool:
				f.Pools = append(f.Pools, *x)
			case *kvv1.KVCachePoolBinding:
				f.Bindings = append(f.Bindings, *x)
			case *kvv1.InstanceType:
				f.InstanceTypes = append(f.InstanceTypes, *x)
			case *kvv1.ModelDeployment:
				models = append(models, *x)
			}
		}
		return f, models
	}
	others := slices.DeleteFunc(slices.Clone(cluster), same)
	switch obj.(type) {
	case *kvv1.Setting:
		kind = "Setting"
	case *kvv1.KVCacheBackend:
		kind = "KVCacheBackend"
	case *kvv1.KVCachePool:
		kind = "KVCachePool"
	case *kvv1.KVCachePoolBinding:
		kind = "KVCachePoolBinding"
	case *kvv1.ModelDeployment:
		kind = "ModelDeployment"
	}
	var judged []rules.Judged
	var err error
	if old == nil {
		f, models := sets(append(others, obj))
		judged, err = rules.Judge(context.Background(), f, models, objects.FileOptions{})
	} else {
		r, rerr := generator.NewRenderer()
		require.NoError(t, rerr)
		held, heldModels := sets(append(others, old))
		manifests, models := sets([]client.Object{obj})
		judged, err = rules.JudgeApply(context.Background(), rules.Apply{
			Cluster: held, ClusterModels: heldModels, Manifests: manifests, Models: models, Renderer: r,
		})
		if err == nil {
			require.Len(t, judged, 1)
			assert.True(t, judged[0].Update, "judged as an update of the object the cluster holds")
		}
	}
	require.NoError(t, err)
	var got []string
	var warnings admission.Warnings
	for _, j := range judged {
		if j.Kind != kind || j.Name != name {
			continue
		}
		for _, e := range j.Verdict.Errors {
			got = append(got, e.Field+": "+e.ErrorBody())
		}
		warnings = append(warnings, j.Verdict.Warnings...)
	}
	assert.Equal(t, want, got, "the CLI's verdict")
	if len(warn) == 0 {
		assert.Empty(t, warnings, "the CLI's warnings")
	} else {
		assert.Equal(t, warn, warnings, "the CLI's warnings")
	}
}

// vtCauses returns an Invalid error's field errors as "<field>: <message>", as kubectl prints
// them after "is invalid: ". nil for a nil error; the test fails for an error of another kind.
func vtCauses(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %T: %v", err, err)
	var se *apierrors.StatusError
	require.True(t, errors.As(err, &se))
	var out []string
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	return out
}

func TestInvalidErrorNamesTheKindAndObject(t *testing.T) {
	v := &PoolValidator{Reader: vtReader(t)}
	_, err := v.ValidateCreate(context.Background(), vtPool("shared-dram", "mooncake-dram"))
	require.True(t, apierrors.IsInvalid(err))
	assert.Equal(t, `KVCachePool.worker.gpustack.ai "shared-dram" is invalid: spec.backends[0]: Not found: "mooncake-dram": no KVCacheBackend has this name; create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings`, err.Error())
	var se *apierrors.StatusError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, "worker.gpustack.ai", se.ErrStatus.Details.Group)
	assert.Equal(t, "KVCachePool", se.ErrStatus.Details.Kind)
	assert.Equal(t, "shared-dram", se.ErrStatus.Details.Name)
}

func TestBackendValidator(t *testing.T) {
	const (
		leaderImage  = "spec.image: Required value: no store image for the leader: set spec.image, or create the Setting kv-cache-backend-image (the chart installs it)"
		tenancyPath  = "spec.connection.managed.leader.multiTenancy: Forbidden: "
		tenancyOne   = tenancyPath + "KVCachePool shared-dram uses this backend and its Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete the pool first, or keep multiTenancy: true"
		tenancyTwo   = tenancyPath + "KVCachePools shared-dram, spare-dram use this backend and their Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete those pools first, or keep multiTenancy: true"
		restartOne   = "this change restarts the store's master (the leader's Pod template changes): with one leader replica the master stops and starts empty, so the store is unavailable for seconds and the cache is cold: every object cached on KVCacheBackend mooncake-dram misses afterwards (with leader.replicas: 3 it would be one graceful handover)"
		handover     = "this change restarts the store's master (the leader's Pod template changes): the 3 leader replicas are replaced standbys first, then the serving leader hands over once, gracefully, to an updated standby; the master that takes over starts empty, so the cache is cold: every object cached on KVCacheBackend mooncake-dram misses afterwards"
		warmHandover = "this change restarts the store's masters (the leader's Pod template changes): the 3 leader replicas are replaced standbys first, then the serving leader hands over once to an updated standby, which replays the operation log and keeps the cache; the store serves no request for about 10 s while the leadership moves"
		toWarm       = "this change moves the store between warm failover (electionBackend: Etcd) and the Lease: every master restarts and the new one starts with an empty index, so the cache is cold: every object cached on KVCacheBackend mooncake-dram misses afterwards"
		members0     = "this change replaces the members of group 0 (their Pod template changes), one at a time: each drains its objects to the other members first, so they are moved, not lost, while the others have room"
	)
	tenancyOff := func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false) }
	tests := []vtCase[*kvv1.KVCacheBackend]{
		{
			name:    "the walkthrough backend is admitted with the chart's image Setting",
			cluster: []client.Object{vtImageSetting()},
			obj:     vtBackend("mooncake-dram"),
		},
		{
			name: "a backend without spec.image is refused when the Setting does not exist",
			obj:  vtBackend("mooncake-dram"),
			want: []string{leaderImage},
		},
		{
			name:    "a capacity that is not a whole number of bytes is refused, naming the field",
			cluster: []client.Object{vtImageSetting()},
			obj: func() *kvv1.KVCacheBackend {
				b := vtBackend("mooncake-dram")
				b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("100m")
				b.Spec.Connection.Managed.Members[0].LocalBufferSize = ptr.To(resource.MustParse("0.5"))
				return b
			}(),
			want: []string{
				`spec.connection.managed.members[0].capacityPerMember: Invalid value: "100m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 8Gi`,
				`spec.connection.managed.members[0].localBufferSize: Invalid value: "500m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 128Mi`,
			},
		},
		{
			name:    "a fraction of a byte is refused on update too",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("8589934591.5")
			},
			want: []string{`spec.connection.managed.members[0].capacityPerMember: Invalid value: "8589934591500m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 8Gi`},
		},
		{
			name: "a backend naming spec.image is admitted without the Setting",
			obj: func() *kvv1.KVCacheBackend {
				b := vtBackend("mooncake-dram")
				b.Spec.Image = "example.com/mooncake:1"
				return b
			}(),
		},
		{
			name:    "turning multi-tenancy off while a pool uses the backend is refused, naming the pool",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate:  tenancyOff,
			want:    []string{tenancyOne},
		},
		{
			name:    "turning multi-tenancy off while two pools use the backend is refused, naming both",
			cluster: append(vtWalkthrough(), vtPool("spare-dram", "mooncake-dram"), vtPool("other", "mooncake-vram")),
			old:     vtBackend("mooncake-dram"),
			mutate:  tenancyOff,
			want:    []string{tenancyTwo},
		},
		{
			name:    "turning multi-tenancy off with no pool on the backend is admitted, saying the master restarts",
			cluster: []client.Object{vtImageSetting(), vtPool("other", "mooncake-vram")},
			old:     vtBackend("mooncake-dram"),
			mutate:  tenancyOff,
			warn:    admission.Warnings{restartOne},
		},
		{
			name:    "turning multi-tenancy on is admitted while pools use the backend, saying the master restarts",
			cluster: vtWalkthrough(),
			old:     vtNoLedger("mooncake-dram"),
			mutate:  func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(true) },
			warn:    admission.Warnings{restartOne},
		},
		{
			name:    "a leader flag changed with standbys warns of one graceful handover and a cold cache",
			cluster: vtWalkthrough(),
			old:     vtReplicas(vtBackend("mooncake-dram"), 3),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Leader.ExtraArgs = []string{"-default_kv_lease_ttl=10m"}
			},
			warn: admission.Warnings{handover},
		},
		{
			name:    "a warm store's leader flag changed with standbys warns of one handover that keeps the cache",
			cluster: []client.Object{vtImageSetting()},
			old:     vtReplicas(vtWarm("mooncake-dram"), 3),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Leader.ExtraArgs = []string{"-default_kv_lease_ttl=10m"}
			},
			warn: admission.Warnings{warmHandover},
		},
		{
			name:    "turning warm failover on warns that this once the cache is cold, and that members are replaced",
			cluster: []client.Object{vtImageSetting()},
			old:     vtReplicas(vtNoLedger("mooncake-dram"), 3),
			mutate: func(b *kvv1.KVCacheBackend) {
				w := vtWarm("mooncake-dram")
				b.Spec.Connection.Managed.Leader.ElectionBackend, b.Spec.Connection.Managed.Leader.Etcd = w.Spec.Connection.Managed.Leader.ElectionBackend, w.Spec.Connection.Managed.Leader.Etcd
			},
			warn: admission.Warnings{toWarm, members0},
		},
		{
			name:    "scaling the leader from one replica to three restarts nothing, so it warns of nothing",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate:  func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.Replicas = ptr.To[int32](3) },
		},
		{
			name:    "a member group's nodeSelector changed warns that members on nodes no longer selected stop, draining first",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Members[0].NodeSelector = map[string]string{"pool": "z"}
			},
			warn: admission.Warnings{"member group 0's nodeSelector changes: members on nodes it no longer selects stop, each first draining its objects to the other members"},
		},
		{
			name:    "the last member group removed warns that its members drain to the rest",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram", "", ""),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Members = b.Spec.Connection.Managed.Members[:1]
			},
			warn: admission.Warnings{"member group 1 is removed: its members stop, each first draining its objects to the remaining members (moved, not lost, while they have room)"},
		},
		{
			name:    "a medium change is refused on update",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate:  func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Members[0].Medium = kvv1.MediumVRAM },
			want:    []string{"spec.connection.managed.members[0].medium: Forbidden: a member group's medium is immutable (the group at this position is DRAM; its members registered DRAM segments with the master); keep DRAM here and append a new group with medium: VRAM instead"},
		},
		{
			name:    "an update is judged with the Setting too: growing a group passes, saying its members are replaced, draining first",
			cluster: vtWalkthrough(),
			old:     vtBackend("mooncake-dram"),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("16Gi")
			},
			warn: admission.Warnings{members0},
		},
		{
			name: "a metadata-only update (finalizer removal) is admitted even when the backend would no longer validate",
			old:  vtDeleting(vtBackend("mooncake-dram")),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Finalizers = nil
			},
		},
		{
			name: "an update that only spells out defaults is a metadata-only update",
			old:  vtBackend("mooncake-dram"),
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Default()
			},
		},
	}
	renderer, err := generator.NewRenderer()
	require.NoError(t, err)
	runVTCases(t, tests, func(r objects.Reader) admission.Validator[*kvv1.KVCacheBackend] {
		return &BackendValidator{Reader: r, Renderer: renderer}
	})

	t.Run("delete is admitted", func(t *testing.T) {
		v := &BackendValidator{Reader: vtReader(t, vtWalkthrough()...)}
		w, err := v.ValidateDelete(context.Background(), vtBackend("mooncake-dram"))
		assert.NoError(t, err)
		assert.Empty(t, w)
	})
	t.Run("a Setting that cannot be read refuses the backend with an internal error", func(t *testing.T) {
		v := &BackendValidator{Reader: vtFailingReader[*kvv1.Setting](t)}
		_, err := v.ValidateCreate(context.Background(), vtBackend("mooncake-dram"))
		require.Error(t, err)
		assert.True(t, apierrors.IsInternalError(err), "got %v", err)
		assert.Contains(t, err.Error(), "could not read the Setting kv-cache-backend-image: ")
	})
}

func TestPoolValidator(t *testing.T) {
	const noLedgerWarning = "KVCacheBackend mooncake-dram keeps no tenant ledger (leader.multiTenancy: false): Binding ceilings on this pool are not enforced and every write lands in the store's default tenant"
	tests := []vtCase[*kvv1.KVCachePool]{
		{
			name:    "a pool over an existing backend is admitted without a warning",
			cluster: []client.Object{vtBackend("mooncake-dram")},
			obj:     vtPool("shared-dram", "mooncake-dram"),
		},
		{
			name: "a pool over a missing backend is refused, saying to create the backend first",
			obj:  vtPool("shared-dram", "mooncake-dram"),
			want: []string{`spec.backends[0]: Not found: "mooncake-dram": no KVCacheBackend has this name; create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings`},
		},
		{
			name:    "a pool over a backend without a ledger is admitted with a warning",
			cluster: []client.Object{vtNoLedger("mooncake-dram")},
			obj:     vtPool("shared-dram", "mooncake-dram"),
			warn:    admission.Warnings{noLedgerWarning},
		},
		{
			name: "a pool over an external backend is admitted without a warning",
			cluster: []client.Object{func() *kvv1.KVCacheBackend {
				b := vtBackend("mooncake-dram")
				b.Spec.Connection.Managed = nil
				b.Spec.Connection.External = &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
					{Name: kvv1.EndpointClient, Address: "m.store.svc:50051"}, {Name: kvv1.EndpointAdmin, Address: "m.store.svc:9003"},
				}}
				return b
			}()},
			obj: vtPool("shared-dram", "mooncake-dram"),
		},
		{
			name:    "a pool over a backend being deleted is refused",
			cluster: []client.Object{vtDeleting(vtBackend("mooncake-dram"))},
			obj:     vtPool("shared-dram", "mooncake-dram"),
			want:    []string{"spec.backends[0]: Forbidden: KVCacheBackend mooncake-dram is being deleted, so no new pool may divide it; name another backend"},
		},
		{
			name:    "the pool's own rules run too: a zero total is refused",
			cluster: []client.Object{vtBackend("mooncake-dram")},
			obj: func() *kvv1.KVCachePool {
				p := vtPool("shared-dram", "mooncake-dram")
				p.Spec.Quota.Total = resource.MustParse("0")
				return p
			}(),
			want: []string{`spec.quota.total: Invalid value: "0": must be greater than zero, e.g. 16Gi`},
		},
		{
			name:    "a total that is not a whole number of bytes is refused",
			cluster: []client.Object{vtBackend("mooncake-dram")},
			obj: func() *kvv1.KVCachePool {
				p := vtPool("shared-dram", "mooncake-dram")
				p.Spec.Quota.Total = resource.MustParse("100m")
				return p
			}(),
			want: []string{`spec.quota.total: Invalid value: "100m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 16Gi`},
		},
		{
			name:    "another backend is refused on update",
			cluster: []client.Object{vtBackend("mooncake-dram"), vtBackend("mooncake-vram")},
			old:     vtPool("shared-dram", "mooncake-dram"),
			mutate:  func(p *kvv1.KVCachePool) { p.Spec.Backends = []string{"mooncake-vram"} },
			want:    []string{"spec.backends: Forbidden: is immutable (it is mooncake-dram): the pool's Bindings registered their domains on that backend's master; create a new KVCachePool for another backend"},
		},
		{
			name:   "raising the total is admitted on update even when the backend has gone since",
			old:    vtPool("shared-dram", "mooncake-dram"),
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.MustParse("32Gi") },
		},
		{
			name:    "raising the total on a pool over a backend without a ledger repeats the warning",
			cluster: []client.Object{vtNoLedger("mooncake-dram")},
			old:     vtPool("shared-dram", "mooncake-dram"),
			mutate:  func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.MustParse("32Gi") },
			warn:    admission.Warnings{noLedgerWarning},
		},
		{
			name:   "removing a finalizer is admitted",
			old:    vtDeleting(vtPool("shared-dram", "mooncake-dram")),
			mutate: func(p *kvv1.KVCachePool) { p.Finalizers = nil },
		},
	}
	runVTCases(t, tests, func(r objects.Reader) admission.Validator[*kvv1.KVCachePool] { return &PoolValidator{Reader: r} })
}

func TestBindingValidator(t *testing.T) {
	const noLedgerDomain = "spec.domain.name: Forbidden: KVCacheBackend mooncake-dram keeps no tenant ledger (leader.multiTenancy: false), so every write lands in one default tenant and the backend carries one domain only: domain %q is registered there by KVCachePoolBinding %s; attach through that Binding, or use a backend with multiTenancy: true for a second domain"
	tests := []vtCase[*kvv1.KVCachePoolBinding]{
		{
			name:    "the walkthrough Binding is admitted",
			cluster: vtWalkthrough()[:3],
			obj:     vtBinding("team-a", "team-a", "shared-dram", ""),
		},
		{
			name:    "a Binding naming a missing pool is refused, saying to create the pool first",
			cluster: []client.Object{vtBackend("mooncake-dram")},
			obj:     vtBinding("team-a", "team-a", "shared-dram", ""),
			want:    []string{`spec.poolRef.name: Not found: "shared-dram": names no KVCachePool; create the pool first (KVCacheBackend, then KVCachePool, then KVCachePoolBinding)`},
		},
		{
			name:    "a Binding on a pool being deleted is refused",
			cluster: []client.Object{vtBackend("mooncake-dram"), vtDeleting(vtPool("shared-dram", "mooncake-dram"))},
			obj:     vtBinding("team-a", "team-a", "shared-dram", ""),
			want:    []string{"spec.poolRef.name: Forbidden: KVCachePool shared-dram is being deleted, so no new Binding may grant it; name another pool"},
		},
		{
			name:    "the ceiling is checked against the pool read from the cluster",
			cluster: vtWalkthrough()[:3],
			obj: func() *kvv1.KVCachePoolBinding {
				b := vtBinding("team-a", "team-a", "shared-dram", "")
				b.Spec.Quota.Ceiling = resource.MustParse("32Gi")
				return b
			}(),
			want: []string{`spec.quota.ceiling: Invalid value: "32Gi": exceeds the total 16Gi of KVCachePool shared-dram; lower the ceiling or raise the pool's spec.quota.total`},
		},
		{
			name:    "a ceiling that is not a whole number of bytes is refused",
			cluster: vtWalkthrough()[:3],
			obj: func() *kvv1.KVCachePoolBinding {
				b := vtBinding("team-a", "team-a", "shared-dram", "")
				b.Spec.Quota.Ceiling = resource.MustParse("1500m")
				return b
			}(),
			want: []string{`spec.quota.ceiling: Invalid value: "1500m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 8Gi`},
		},
		{
			name: "a domain registered on the same master through another pool is refused, naming the holder",
			cluster: append(vtWalkthrough(),
				vtPool("premium-dram", "mooncake-dram"),
				vtBinding("team-b", "chat", "premium-dram", "team-a-chat")),
			obj:  vtBinding("team-a", "chat", "shared-dram", "team-a-chat"),
			want: []string{`spec.domain.name: Duplicate value: "team-a-chat": already registered on the master of KVCacheBackend mooncake-dram by KVCachePoolBinding team-b/chat; name a different domain`},
		},
		{
			name:    "the default domain is registered once per master: a second Binding leaving the name out is refused",
			cluster: vtWalkthrough(),
			obj:     vtBinding("team-b", "team-b", "shared-dram", ""),
			want:    []string{`spec.domain.name: Duplicate value: "default": already registered on the master of KVCacheBackend mooncake-dram by KVCachePoolBinding team-a/team-a; name a different domain`},
		},
		{
			name: "a domain held by a Binding being deleted is still held",
			cluster: append(vtWalkthrough()[:3],
				vtDeleting(vtBinding("team-b", "chat", "shared-dram", "team-a-chat"))),
			obj:  vtBinding("team-a", "chat", "shared-dram", "team-a-chat"),
			want: []string{`spec.domain.name: Duplicate value: "team-a-chat": already registered on the master of KVCacheBackend mooncake-dram by KVCachePoolBinding team-b/chat; name a different domain`},
		},
		{
			name: "the same domain name on another backend's master is admitted",
			cluster: append(vtWalkthrough(),
				vtBackend("mooncake-vram"), vtPool("shared-vram", "mooncake-vram"),
				vtBinding("team-b", "chat", "shared-vram", "team-a-chat")),
			obj: vtBinding("team-a", "chat", "shared-dram", "team-a-chat"),
		},
		{
			name:    "a second distinct domain on a backend with a ledger is admitted",
			cluster: vtWalkthrough(),
			obj:     vtBinding("team-b", "team-b", "shared-dram", "team-b-chat"),
		},
		{
			name:    "the Binding itself is not its own holder (a create racing a stale read of itself)",
			cluster: append(vtWalkthrough()[:3], vtBinding("team-a", "chat", "shared-dram", "team-a-chat")),
			obj:     vtBinding("team-a", "chat", "shared-dram", "team-a-chat"),
		},
		{
			name:    "the first Binding on a backend without a ledger is admitted",
			cluster: []client.Object{vtNoLedger("mooncake-dram"), vtPool("shared-dram", "mooncake-dram")},
			obj:     vtBinding("team-a", "team-a", "shared-dram", ""),
		},
		{
			name: "a second distinct domain on a backend without a ledger is refused, naming the domain and its holder",
			cluster: []client.Object{vtNoLedger("mooncake-dram"), vtPool("shared-dram", "mooncake-dram"), vtPool("premium-dram", "mooncake-dram"),
				vtBinding("team-a", "team-a", "shared-dram", "")},
			obj:  vtBinding("team-b", "chat", "premium-dram", "team-b-chat"),
			want: []string{fmt.Sprintf(noLedgerDomain, "default", "team-a/team-a")},
		},
		{
			name: "the domain of a Binding being deleted counts on a backend without a ledger",
			cluster: []client.Object{vtNoLedger("mooncake-dram"), vtPool("shared-dram", "mooncake-dram"),
				vtDeleting(vtBinding("team-a", "team-a", "shared-dram", "team-a-chat"))},
			obj:  vtBinding("team-b", "chat", "shared-dram", "team-b-chat"),
			want: []string{fmt.Sprintf(noLedgerDomain, "team-a-chat", "team-a/team-a")},
		},
		{
			name:    "another domain on update is refused with the immutability message",
			cluster: vtWalkthrough(),
			old:     vtBinding("team-a", "team-a", "shared-dram", ""),
			mutate:  func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "team-a-chat" },
			want:    []string{"spec.domain.name: Forbidden: is immutable (it is default): it is the store tenant this Binding's workloads write under; create a new KVCachePoolBinding for another domain"},
		},
		{
			name:    "another pool on update is refused",
			cluster: append(vtWalkthrough(), vtPool("premium-dram", "mooncake-dram")),
			old:     vtBinding("team-a", "team-a", "shared-dram", ""),
			mutate:  func(b *kvv1.KVCachePoolBinding) { b.Spec.PoolRef.Name = "premium-dram" },
			want:    []string{"spec.poolRef.name: Forbidden: is immutable (it is shared-dram): a Binding grants access to one pool, and its domain is registered on that pool's master; create a new KVCachePoolBinding for another pool"},
		},
		{
			name:    "raising the ceiling above the pool's total is refused on update",
			cluster: vtWalkthrough(),
			old:     vtBinding("team-a", "team-a", "shared-dram", ""),
			mutate:  func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("17Gi") },
			want:    []string{`spec.quota.ceiling: Invalid value: "17Gi": exceeds the total 16Gi of KVCachePool shared-dram; lower the ceiling or raise the pool's spec.quota.total`},
		},
		{
			name:   "changing the ceiling is admitted when the pool has gone since",
			old:    vtBinding("team-a", "team-a", "shared-dram", ""),
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("4Gi") },
		},
		{
			name:    "an update does not judge the domain again: a ceiling change on a Binding that shares its domain is admitted",
			cluster: append(vtWalkthrough(), vtBinding("team-b", "team-b", "shared-dram", "")),
			old:     vtBinding("team-b", "team-b", "shared-dram", ""),
			mutate:  func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("4Gi") },
		},
		{
			name:   "removing a finalizer from a Binding whose pool has gone is admitted",
			old:    vtDeleting(vtBinding("team-a", "team-a", "shared-dram", "")),
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Finalizers = nil },
		},
	}
	runVTCases(t, tests, func(r objects.Reader) admission.Validator[*kvv1.KVCachePoolBinding] {
		return &BindingValidator{Reader: r}
	})

	t.Run("Bindings that cannot be listed refuse the Binding with an internal error", func(t *testing.T) {
		s, err := generator.NewScheme()
		require.NoError(t, err)
		r := interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).WithObjects(vtWalkthrough()...).Build(), interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*kvv1.KVCachePoolBindingList); ok {
					return errors.New("connection refused")
				}
				return c.List(ctx, list, opts...)
			},
		})
		_, err = (&BindingValidator{Reader: objects.Cluster{Cached: r}}).ValidateCreate(context.Background(), vtBinding("team-b", "chat", "shared-dram", "chat"))
		require.Error(t, err)
		assert.True(t, apierrors.IsInternalError(err), "got %v", err)
		assert.Contains(t, err.Error(), "could not read the KVCachePoolBindings of KVCachePool shared-dram: connection refused")
	})
}

func TestModelDeploymentValidator(t *testing.T) {
	const (
		mixed  = `spec.kvCache.poolRef.name: Invalid value: "team-a": KVCachePool "shared-dram" offers more than one transport, rdma (members[0]), ascend (members[1]), and a vLLM client installs only one: a block on a group with another transport fails with NotSupportedTransport; make the backend's groups use one protocol or choose another pool`
		ascend = `spec.kvCache.poolRef.name: Invalid value: "team-a": role server runs on InstanceType ascend-910b, whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: vLLM-Ascend accepts only the ascend transport and KVCachePool "shared-dram" offers tcp (members[0]): tcp against ascend, and the engine would fail at start (MooncakeBackend does not support protocol 'tcp'); set spec.transport.protocol: CANN on KVCacheBackend "mooncake-dram" (or transport.protocol: CANN on the member group serving these nodes), or choose a pool that offers ascend`
		owned  = `spec.roles[0].extraArgs: Forbidden: "--kv_transfer_config" in args (read by the engine as --kv-transfer-config) is owned by injection: the Binding writes it, and a second value would be an ambiguity nothing reports; remove it`
		dtype  = `spec.roles[0].extraArgs: Forbidden: --kv-cache-dtype in args is owned by injection: the Binding's domain fixes the KV cache dtype; remove it (or set the Setting model-deployment-kv-cache-dtype-owned to "false" to let containers choose)`
	)
	// cluster is the walkthrough with the backend replaced by one whose groups offer protocols.
	cluster := func(protocols ...kvv1.TransportProtocol) []client.Object {
		objs := vtWalkthrough()
		objs[1] = vtBackend("mooncake-dram", protocols...)
		return objs
	}
	const skewSGLang = "SGLang 0.5.18 bundles the Mooncake client 0.3.12.post1, and the master of KVCacheBackend mooncake-dram runs gpustack/mirrored-mooncake:0.3.13.post1-cpu (Mooncake 0.3.13): a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900); use an engine release on the store's line, or a store image of Mooncake 0.3.12"
	// vLLM-Ascend 0.23.0.post1's image is built with Mooncake 0.3.11.post1 (its Dockerfile), a
	// line before the walkthrough store's 0.3.13.
	const skewAscend = "vLLM-Ascend 0.23.0.post1 bundles the Mooncake client 0.3.11.post1, and the master of KVCacheBackend mooncake-dram runs gpustack/mirrored-mooncake:0.3.13.post1-cpu (Mooncake 0.3.13): a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900); use an engine release on the store's line, or a store image of Mooncake 0.3.11"
	const onAscendServer = "role server runs on InstanceType ascend-910b, whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: "
	fp8Cluster := func() []client.Object {
		objs := vtWalkthrough()
		b := vtBinding("team-a", "team-a", "shared-dram", "")
		b.Spec.Domain.Dtype = "fp8"
		objs[3] = b
		return objs
	}
	sglang := func(md *kvv1.ModelDeployment) *kvv1.ModelDeployment {
		md.Spec.Engine = kvv1.Engine{Name: kvv1.EngineSGLang, Version: "0.5.18"}
		return md
	}
	withRoles := func(roles ...kvv1.Role) *kvv1.ModelDeployment {
		md := vtDeployment()
		md.Spec.Roles = roles
		return md
	}
	// onAscend is withRoles for roles on an Ascend InstanceType, where vLLM runs as vLLM-Ascend and
	// spec.engine.version names a vLLM-Ascend release: the newest the support table has read.
	onAscend := func(roles ...kvv1.Role) *kvv1.ModelDeployment {
		md := withRoles(roles...)
		md.Spec.Engine.Version = "0.23.0.post1"
		return md
	}
	tests := []vtCase[*kvv1.ModelDeployment]{
		{
			name:    "the walkthrough deployment is admitted",
			cluster: vtWalkthrough(),
			obj:     vtDeployment(),
		},
		{
			name:    "a deployment whose Binding is missing is refused, saying to name one in this namespace",
			cluster: vtWalkthrough()[:3],
			obj:     vtDeployment(),
			want:    []string{`spec.kvCache.poolRef.name: Not found: "team-a": KVCachePoolBinding "team-a" not found in namespace "team-a": create it there (an administrator grants a namespace a pool with a Binding), or fix spec.kvCache.poolRef.name (or remove spec.kvCache)`},
		},
		{
			name:    "a Binding of the same name in another namespace does not count",
			cluster: append(vtWalkthrough()[:3], vtBinding("team-b", "team-a", "shared-dram", "")),
			obj:     vtDeployment(),
			want:    []string{`spec.kvCache.poolRef.name: Not found: "team-a": KVCachePoolBinding "team-a" not found in namespace "team-a": create it there (an administrator grants a namespace a pool with a Binding), or fix spec.kvCache.poolRef.name (or remove spec.kvCache)`},
		},
		{
			name:    "a Binding being deleted is refused to a new deployment",
			cluster: append(vtWalkthrough()[:3], vtDeleting(vtBinding("team-a", "team-a", "shared-dram", ""))),
			obj:     vtDeployment(),
			want:    []string{"spec.kvCache.poolRef.name: Forbidden: KVCachePoolBinding team-a/team-a is being deleted, so new workloads may not attach to it; name another Binding"},
		},
		{
			name:    "scaling a deployment already attached to a Binding being deleted is admitted",
			cluster: append(vtWalkthrough()[:3], vtDeleting(vtBinding("team-a", "team-a", "shared-dram", ""))),
			old:     vtDeployment(),
			mutate:  func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Replicas = ptr.To[int32](3) },
		},
		{
			name:    "a Binding whose pool is missing is refused",
			cluster: []client.Object{vtBinding("team-a", "team-a", "shared-dram", "")},
			obj:     vtDeployment(),
			want:    []string{`spec.kvCache.poolRef.name: Invalid value: "team-a": KVCachePool "shared-dram", named by KVCachePoolBinding team-a/team-a, does not exist; ask an administrator to create it or to fix the Binding's spec.poolRef`},
		},
		{
			name:    "vLLM on a pool offering rdma and ascend is refused with NotSupportedTransport",
			cluster: cluster(kvv1.ProtocolRDMA, kvv1.ProtocolCANN),
			obj:     vtDeployment(),
			want:    []string{mixed},
		},
		{
			name:    "vLLM on a pool offering rdma on every group is admitted",
			cluster: cluster(kvv1.ProtocolRDMA, kvv1.ProtocolRDMA),
			obj:     vtDeployment(),
		},
		{
			name:    "fabric interfaces on an rdma pool are admitted",
			cluster: cluster(kvv1.ProtocolRDMA, kvv1.ProtocolRDMA),
			obj:     withInterface(vtDeployment(), 2),
		},
		{
			name:    "fabric interfaces on a tcp pool are refused: there is no device to grant",
			cluster: cluster(kvv1.ProtocolTCP, kvv1.ProtocolTCP),
			obj:     withInterface(vtDeployment(), 1),
			want:    []string{"spec.roles[0].resources.interface: Invalid value: 1: fabric interfaces are RDMA or EFA devices, and KVCachePool shared-dram offers tcp; set interface to 0, or attach through a pool whose backend offers RDMA or EFA"},
		},
		{
			name:    "vLLM on an ascend InstanceType with a tcp pool is refused with the vLLM-Ascend message",
			cluster: append(vtWalkthrough(), vtInstanceType("ascend-910b", kvv1.ManufacturerAscend)),
			obj:     onAscend(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}),
			want:    []string{ascend},
			warn:    admission.Warnings{onAscendServer + skewAscend},
		},
		{
			// The render runs vLLM-Ascend on such a type too (generator.EngineFor), so admission
			// must judge it as vLLM-Ascend.
			name:    "the manufacturer is matched without case: Ascend is ascend",
			cluster: append(vtWalkthrough(), vtInstanceType("ascend-910b", "Ascend")),
			obj:     onAscend(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}),
			want:    []string{ascend},
			warn:    admission.Warnings{onAscendServer + skewAscend},
		},
		{
			name: "vLLM-Ascend on an external tcp store is told to declare the store's transport, not to set CANN on member groups it has none of",
			cluster: func() []client.Object {
				objs := vtWalkthrough()
				b := vtBackend("mooncake-dram")
				b.Spec.Connection.Managed = nil
				b.Spec.Connection.External = &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
					{Name: kvv1.EndpointClient, Address: "m.store.svc:50051"}, {Name: kvv1.EndpointAdmin, Address: "m.store.svc:9003"},
				}}
				objs[1] = b
				return append(objs, vtInstanceType("ascend-910b", kvv1.ManufacturerAscend))
			}(),
			obj:  onAscend(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}),
			want: []string{`spec.kvCache.poolRef.name: Invalid value: "team-a": role server runs on InstanceType ascend-910b, whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: vLLM-Ascend accepts only the ascend transport and KVCachePool "shared-dram" offers tcp (spec.transport): tcp against ascend, and the engine would fail at start (MooncakeBackend does not support protocol 'tcp'); if the store behind KVCacheBackend "mooncake-dram" serves ascend, declare spec.transport.protocol: CANN there, or choose a pool that offers ascend`},
		},
		{
			name:    "vLLM on an ascend InstanceType with a CANN pool is admitted",
			cluster: append(cluster(kvv1.ProtocolCANN), vtInstanceType("ascend-910b", kvv1.ManufacturerAscend)),
			obj:     onAscend(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}),
			warn:    admission.Warnings{onAscendServer + skewAscend},
		},
		{
			name:    "vLLM on an nvidia InstanceType with a tcp pool is admitted",
			cluster: append(vtWalkthrough(), vtInstanceType("h100", kvv1.ManufacturerNVIDIA)),
			obj:     withRoles(kvv1.Role{Name: "server", InstanceType: "h100"}),
		},
		{
			name:    "a role whose InstanceType does not exist is judged as plain vLLM",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}),
		},
		{
			name:    "SGLang on an ascend InstanceType stays SGLang",
			cluster: append(vtWalkthrough(), vtInstanceType("ascend-910b", kvv1.ManufacturerAscend)),
			obj: func() *kvv1.ModelDeployment {
				md := withRoles(kvv1.Role{Name: "server", InstanceType: "ascend-910b"})
				md.Spec.Engine = kvv1.Engine{Name: kvv1.EngineSGLang, Version: "0.5.18"}
				return md
			}(),
			warn: admission.Warnings{skewSGLang},
		},
		{
			name:    "two ascend roles on a tcp pool are refused once, naming both",
			cluster: append(vtWalkthrough(), vtInstanceType("ascend-910b", kvv1.ManufacturerAscend)),
			obj: onAscend(
				kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill, InstanceType: "ascend-910b"},
				kvv1.Role{Name: "decode", Kind: kvv1.RoleDecode, InstanceType: "ascend-910b"}),
			want: []string{`spec.kvCache.poolRef.name: Invalid value: "team-a": roles prefill (InstanceType ascend-910b), decode (InstanceType ascend-910b) run on InstanceTypes whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: vLLM-Ascend accepts only the ascend transport and KVCachePool "shared-dram" offers tcp (members[0]): tcp against ascend, and the engine would fail at start (MooncakeBackend does not support protocol 'tcp'); set spec.transport.protocol: CANN on KVCacheBackend "mooncake-dram" (or transport.protocol: CANN on the member group serving these nodes), or choose a pool that offers ascend`},
			warn: admission.Warnings{"roles prefill (InstanceType ascend-910b), decode (InstanceType ascend-910b) run on InstanceTypes whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: " + skewAscend},
		},
		{
			name:    "an owned flag in extraArgs is refused in its underscore spelling",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--kv_transfer_config", `{"kv_connector":"X"}`}}),
			want:    []string{owned},
		},
		{
			name:    "the dtype flag is refused while the Setting is absent (owned by default)",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--kv-cache-dtype", "fp8"}}),
			want:    []string{dtype},
		},
		{
			name:    "the dtype flag is admitted when the Setting says the dtype is not owned",
			cluster: append(vtWalkthrough(), vtSetting(kvv1.SettingKVCacheDtypeOwned, "false")),
			obj:     withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--kv-cache-dtype", "fp8"}}),
		},
		{
			name:    "an owned flag is admitted on a deployment without a cache: nothing is injected",
			cluster: vtWalkthrough(),
			obj: func() *kvv1.ModelDeployment {
				md := withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--kv-transfer-config", "{}"}})
				md.Spec.KVCache = nil
				return md
			}(),
		},
		{
			name:    "MOONCAKE_CONFIG_PATH in a vLLM role's env is refused",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", Env: []corev1.EnvVar{{Name: "HF_HOME", Value: "/data"}, {Name: "MOONCAKE_CONFIG_PATH", Value: "/x.json"}}}),
			want:    []string{"spec.roles[0].env[1].name: Forbidden: MOONCAKE_CONFIG_PATH selects where vLLM reads its store configuration from, which would leave every value the Binding configures unread; remove it and let the Binding configure the store"},
		},
		{
			name:    "MOONCAKE_CONFIG_PATH on SGLang, which does not read it, is admitted; its own source variable is refused",
			cluster: vtWalkthrough(),
			obj: func() *kvv1.ModelDeployment {
				md := withRoles(kvv1.Role{Name: "server", Env: []corev1.EnvVar{{Name: "MOONCAKE_CONFIG_PATH"}, {Name: "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"}}})
				md.Spec.Engine = kvv1.Engine{Name: kvv1.EngineSGLang, Version: "0.5.18"}
				return md
			}(),
			want: []string{"spec.roles[0].env[1].name: Forbidden: SGLANG_HICACHE_MOONCAKE_CONFIG_PATH selects where SGLang reads its store configuration from, which would leave every value the Binding configures unread; remove it and let the Binding configure the store"},
			warn: admission.Warnings{skewSGLang},
		},
		{
			name:    "the shape rules run too: a Prefill role without a Decode role is refused",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill}),
			want:    []string{`spec.roles[0].kind: Invalid value: "Prefill": a Prefill role hands its KV cache to a Decode role and this deployment has none; add a role with kind: Decode, or set kind: Server`},
		},
		{
			name:    "attaching on update to a Binding that does not exist is refused",
			cluster: vtWalkthrough(),
			old:     func() *kvv1.ModelDeployment { md := vtDeployment(); md.Spec.KVCache = nil; return md }(),
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.KVCache = &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "team-x"}}
			},
			want: []string{`spec.kvCache.poolRef.name: Not found: "team-x": KVCachePoolBinding "team-x" not found in namespace "team-a": create it there (an administrator grants a namespace a pool with a Binding), or fix spec.kvCache.poolRef.name (or remove spec.kvCache)`},
		},
		{
			name:    "SGLang attached to a Binding in fp8, a spelling SGLang's --kv-cache-dtype lacks, is refused naming the ones it takes",
			cluster: fp8Cluster(),
			obj:     sglang(vtDeployment()),
			want:    []string{`spec.kvCache.poolRef.name: Invalid value: "team-a": KVCachePoolBinding team-a/team-a has the dtype "fp8", which SGLang 0.5.18 does not accept for --kv-cache-dtype, so the engine would exit at start on an argument error; SGLang 0.5.18 accepts auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16, fp4_e2m1: attach through a Binding whose domain's dtype it accepts (a domain is immutable, so another dtype needs another Binding)`},
			warn:    admission.Warnings{skewSGLang},
		},
		{
			name:    "vLLM attached to the same fp8 Binding is admitted: the Binding stays valid for engines that take its dtype",
			cluster: fp8Cluster(),
			obj:     vtDeployment(),
		},
		{
			name:    "SGLang on an fp8 Binding is admitted while the Setting leaves the dtype to containers",
			cluster: append(fp8Cluster(), vtSetting(kvv1.SettingKVCacheDtypeOwned, "false")),
			obj:     sglang(vtDeployment()),
			warn:    admission.Warnings{skewSGLang},
		},
		{
			name:    "a bare -- in a role's extraArgs is refused: the attachment's flags would become positionals",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--max-model-len", "8192", "--"}}),
			want:    []string{`spec.roles[0].extraArgs[2]: Forbidden: a bare "--" makes vLLM read every argument after it as a positional argument, so the flags the cache attachment appends would not be read as flags; remove it`},
		},
		{
			name:    "MOONCAKE_MASTER in a vLLM-Ascend role's env is refused: that engine reads it over the projected file",
			cluster: append(cluster(kvv1.ProtocolCANN), vtInstanceType("ascend-910b", kvv1.ManufacturerAscend)),
			obj:     onAscend(kvv1.Role{Name: "server", InstanceType: "ascend-910b", Env: []corev1.EnvVar{{Name: "MOONCAKE_MASTER", Value: "elsewhere:50051"}}}),
			want:    []string{"spec.roles[0].env[0].name: Forbidden: env MOONCAKE_MASTER is read by vLLM-Ascend instead of the projected file's value, so the Binding's would be unread; remove it and let the Binding configure the store"},
			warn:    admission.Warnings{onAscendServer + skewAscend},
		},
		{
			name:    "an owned flag reaching the engine through $(NAME) in extraArgs is refused as expanded",
			cluster: vtWalkthrough(),
			obj: withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--max-model-len=8192", "$(EXTRA)"},
				Env: []corev1.EnvVar{{Name: "EXTRA", Value: "--kv-offloading-size=8"}}}),
			want: []string{`spec.roles[0].extraArgs: Forbidden: --kv-offloading-size in args[1] ("$(EXTRA)", which the kubelet expands to "--kv-offloading-size=8") makes vLLM replace the injected connector with its OffloadingConnector, silently, so the container would use no shared cache; remove it (host-DRAM offloading and the shared pool are alternatives, choose one)`},
		},
		{
			name:    "a value from a ConfigMap at the start of an extraArgs argument is refused, naming the variable",
			cluster: vtWalkthrough(),
			obj: withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--served-model-name=$(NAME)", "$(EXTRA)"}, Env: []corev1.EnvVar{
				{Name: "NAME", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "engine"}, Key: "name"}}},
				{Name: "EXTRA", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "engine"}, Key: "args"}}},
			}}),
			want: []string{`spec.roles[0].extraArgs[1]: Forbidden: the argument "$(EXTRA)": env EXTRA, at the start of an argument, takes its value from valueFrom.configMapKeyRef (ConfigMap engine, key args), which admission cannot read; the kubelet substitutes it before vLLM parses its arguments, so it could be a flag injection owns or refuses, unseen; give EXTRA a literal value in env, or use $(EXTRA) only as a flag's value (--flag=$(EXTRA))`},
		},
		{
			name:    "a variable the attachment writes reads as the Binding's value, not the role's own declaration",
			cluster: vtWalkthrough(),
			obj: sglang(withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--served-model-name", "$(MOONCAKE_PROTOCOL)", "--kv$(MOONCAKE_DEVICE)"},
				Env: []corev1.EnvVar{{Name: "MOONCAKE_PROTOCOL", Value: "--hicache-storage-backend=file"}}})),
			want: []string{`spec.roles[0].extraArgs[2]: Forbidden: the argument "--kv$(MOONCAKE_DEVICE)": env MOONCAKE_DEVICE, in the name of a flag, is written by the cache attachment with the Binding's value; the kubelet substitutes it before SGLang parses its arguments, so it could make one injection owns or refuses, unseen; use $(MOONCAKE_DEVICE) only as a whole argument that cannot begin with '-' or as a flag's value (--flag=$(MOONCAKE_DEVICE))`},
			warn: admission.Warnings{skewSGLang},
		},
		{
			name:    "a file of options in extraArgs is refused, naming the field",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--config", "/etc/vllm/serve.yaml"}}),
			want:    []string{`spec.roles[0].extraArgs: Forbidden: --config in args names a file of options vLLM reads into its arguments, where admission cannot see them: a key there for --kv-transfer-config, --kv-cache-dtype or --kv-offloading-size would set what injection owns or refuses, unseen; pass those options as arguments instead, where they are checked`},
		},
		{
			name:    "a file of options is admitted on a deployment without a cache: nothing is injected",
			cluster: vtWalkthrough(),
			obj: func() *kvv1.ModelDeployment {
				md := withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--config", "/etc/vllm/serve.yaml"}})
				md.Spec.KVCache = nil
				return md
			}(),
		},
		{
			name:    "an SGLang decode role whose extraArgs select the prefill half is refused, naming the argument",
			cluster: vtWalkthrough(),
			obj: sglang(withRoles(kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill},
				kvv1.Role{Name: "decode", Kind: kvv1.RoleDecode, ExtraArgs: []string{"--disaggregation-mode", "prefill"}})),
			want: []string{`spec.roles[1].extraArgs[1]: Forbidden: --disaggregation-mode prefill contradicts the role's kind Decode, which renders --disaggregation-mode decode, so SGLang would be handed both; remove it: the kind selects the half`},
			warn: admission.Warnings{skewSGLang},
		},
		{
			name: "an SGLang server role made a decode half by extraArgs is refused, without a cache too",
			obj: func() *kvv1.ModelDeployment {
				md := sglang(withRoles(kvv1.Role{Name: "server", ExtraArgs: []string{"--disaggregation-mode=decode"}}))
				md.Spec.KVCache = nil
				return md
			}(),
			want: []string{`spec.roles[0].extraArgs[0]: Forbidden: --disaggregation-mode decode makes this role a decode half, and its kind is Server, a plain server, with no other half to pair with; remove the flag and set kind: Decode, with a role of the other half, to split the deployment`},
		},
		{
			name:    "extraArgs repeating the half the kind selects are admitted",
			cluster: vtWalkthrough(),
			obj: sglang(withRoles(kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill, ExtraArgs: []string{"--disaggregation-mode=prefill"}},
				kvv1.Role{Name: "decode", Kind: kvv1.RoleDecode})),
			warn: admission.Warnings{skewSGLang},
		},
		{
			name: "a mode admission cannot read cannot be judged against the kind and is refused",
			obj: func() *kvv1.ModelDeployment {
				md := sglang(withRoles(kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill, ExtraArgs: []string{"--disaggregation-mode", "$(MODE)"},
					Env: []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mode']"}}}}},
					kvv1.Role{Name: "decode", Kind: kvv1.RoleDecode}))
				md.Spec.KVCache = nil
				return md
			}(),
			want: []string{`spec.roles[0].extraArgs[1]: Forbidden: the value of --disaggregation-mode, "$(MODE)", is env MODE, whose value comes from valueFrom.fieldRef (metadata.annotations['mode']), which admission cannot read, so whether it matches the role's kind Prefill cannot be judged; remove it (the kind selects the half)`},
		},
		{
			name: "without a cache, a vLLM prefill role whose own --kv-transfer-config says kv_consumer is refused",
			obj: func() *kvv1.ModelDeployment {
				md := withRoles(
					kvv1.Role{Name: "prefill", Kind: kvv1.RolePrefill, ExtraArgs: []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`}},
					kvv1.Role{Name: "decode", Kind: kvv1.RoleDecode, ExtraArgs: []string{"--kv-transfer-config.kv_role=kv_consumer", `--kv_transfer_config.kv_connector=NixlConnector`}})
				md.Spec.KVCache = nil
				return md
			}(),
			want: []string{`spec.roles[0].extraArgs[1]: Forbidden: kv_role kv_consumer in --kv-transfer-config contradicts the role's kind Prefill, whose kv_role is kv_producer; use kind Decode, or kv_role kv_producer`},
		},
		{
			name:    "an accelerator count on a role without an InstanceType is refused: the render would request no device",
			cluster: vtWalkthrough(),
			obj:     withRoles(kvv1.Role{Name: "server", Resources: kvv1.RoleResources{Accelerator: 1}}),
			want:    []string{`spec.roles[0].resources.accelerator: Invalid value: 1: the role names no instanceType, so there is no accelerator resource to request and its Pods would get no device; set instanceType to an InstanceType whose spec.accelerator names the device plugin's resource, or set accelerator to 0`},
		},
		{
			name:    "an accelerator count on an InstanceType that names no accelerator resource is refused",
			cluster: append(vtWalkthrough(), &kvv1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu-large"}}),
			obj:     withRoles(kvv1.Role{Name: "server", InstanceType: "cpu-large", Resources: kvv1.RoleResources{Accelerator: 2}}),
			want:    []string{`spec.roles[0].resources.accelerator: Invalid value: 2: InstanceType cpu-large names no accelerator resource (spec.accelerator.resourceName), so there is nothing to request and the role's Pods would get no device; set spec.accelerator on InstanceType cpu-large, or set accelerator to 0`},
		},
		{
			name:    "an accelerator count on an InstanceType with an accelerator is admitted",
			cluster: append(vtWalkthrough(), vtInstanceType("h100", kvv1.ManufacturerNVIDIA)),
			obj:     withRoles(kvv1.Role{Name: "server", InstanceType: "h100", Resources: kvv1.RoleResources{Accelerator: 8}}),
		},
		{
			name:   "removing a finalizer is admitted when the Binding has gone",
			old:    vtDeleting(vtDeployment()),
			mutate: func(md *kvv1.ModelDeployment) { md.Finalizers = nil },
		},
	}
	runVTCases(t, tests, func(r objects.Reader) admission.Validator[*kvv1.ModelDeployment] {
		return &ModelDeploymentValidator{Reader: r}
	})

	t.Run("an InstanceType that cannot be read refuses the deployment with an internal error", func(t *testing.T) {
		v := &ModelDeploymentValidator{Reader: vtFailingReader[*kvv1.InstanceType](t, vtWalkthrough()...)}
		_, err := v.ValidateCreate(context.Background(), withRoles(kvv1.Role{Name: "server", InstanceType: "ascend-910b"}))
		require.Error(t, err)
		assert.True(t, apierrors.IsInternalError(err), "got %v", err)
		assert.Contains(t, err.Error(), "could not read InstanceType ascend-910b: ")
	})
}

func TestSettingValidator(t *testing.T) {
	v := &SettingValidator{}
	ctx := context.Background()

	_, err := v.ValidateCreate(ctx, vtImageSetting())
	assert.NoError(t, err)

	_, err = v.ValidateCreate(ctx, vtSetting("kv-cache-dtype", "bfloat16"))
	assert.Equal(t, []string{`metadata.name: Unsupported value: "kv-cache-dtype": supported values: "kv-cache-backend-image", "model-deployment-kv-cache-dtype-owned"`}, vtCauses(t, err))

	old := vtSetting(kvv1.SettingKVCacheDtypeOwned, "true")
	s := old.DeepCopy()
	s.Spec.Value = "no"
	_, err = v.ValidateUpdate(ctx, old, s)
	assert.Equal(t, []string{`spec.value: Unsupported value: "no": supported values: "true", "false"`}, vtCauses(t, err))

	s.Spec.Value = "false"
	_, err = v.ValidateUpdate(ctx, old, s)
	assert.NoError(t, err)

	_, err = v.ValidateDelete(ctx, old)
	assert.NoError(t, err)
}

func withInterface(md *kvv1.ModelDeployment, n int32) *kvv1.ModelDeployment {
	md.Spec.Roles[0].Resources.Interface = n
	return md
}

// Every release of the support table, admitted as a ModelDeployment is, through the webhook and
// `kvcache render` alike: the verdicts below are typed from measurement (each release's own
// code and what is known of the Mooncake client its image bundles), not from the table.
func TestModelDeploymentOnEveryRelease(t *testing.T) {
	const store = "the master of KVCacheBackend mooncake-dram runs gpustack/mirrored-mooncake:0.3.13.post1-cpu (Mooncake 0.3.13)"
	unknownClient := func(engine, version, source string) string {
		return fmt.Sprintf("which Mooncake client %s %s bundles is not known here (%s), so nothing checks that it is on the line of the master of KVCacheBackend mooncake-dram (Mooncake 0.3.13): a client on another line starts healthy and then fails every write with RPC_FAIL (-900); check it in the image (pip show mooncake-transfer-engine)", engine, version, source)
	}
	skew := func(engine, version, client, line string) string {
		return fmt.Sprintf("%s %s bundles the Mooncake client %s, and %s: a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900); use an engine release on the store's line, or a store image of Mooncake %s", engine, version, client, store, line)
	}
	const onAscendServer = "role server runs on InstanceType ascend-910b, whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: "
	deployment := func(engine kvv1.EngineName, version string, ascend bool) *kvv1.ModelDeployment {
		md := vtDeployment()
		md.Spec.Engine = kvv1.Engine{Name: engine, Version: version}
		if ascend {
			md.Spec.Roles = []kvv1.Role{{Name: "server", InstanceType: "ascend-910b"}}
		}
		return md
	}
	walkthrough := vtWalkthrough
	ascendCluster := func() []client.Object {
		objs := vtWalkthrough()
		objs[1] = vtBackend("mooncake-dram", kvv1.ProtocolCANN)
		return append(objs, vtInstanceType("ascend-910b", kvv1.ManufacturerAscend))
	}
	withDtype := func(dtype string) []client.Object {
		objs := vtWalkthrough()
		b := vtBinding("team-a", "team-a", "shared-dram", "")
		b.Spec.Domain.Dtype = dtype
		objs[3] = b
		return objs
	}
	tests := []vtCase[*kvv1.ModelDeployment]{
		{name: "vLLM 0.29.0: its client is on the store's line", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.29.0", false)},
		{name: "vLLM 0.30.0", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.30.0", false),
			warn: admission.Warnings{unknownClient("vLLM", "0.30.0", "unknown: vllm-0.30.0.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "vLLM 0.31.0 (the reader moved to vllm.distributed.mooncake_store)", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.31.0", false),
			warn: admission.Warnings{unknownClient("vLLM", "0.31.0", "unknown: vllm-0.31.0.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "vLLM 0.32.0", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.32.0", false),
			warn: admission.Warnings{unknownClient("vLLM", "0.32.0", "unknown: vllm-0.32.0.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "vLLM 0.33.0", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.33.0", false),
			warn: admission.Warnings{unknownClient("vLLM", "0.33.0", "unknown: vllm-0.33.0.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "vLLM 0.28.0, older than every release read, is refused", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.28.0", false),
			want: []string{`spec.engine.version: Invalid value: "0.28.0": vLLM 0.28.0 (spec.engine.version) is not supported: it is older than 0.29.0, the first release this project has read, so nothing proves its Mooncake reader accepts the configuration injection writes; run a release injection supports: vLLM 0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0`}},
		{name: "SGLang 0.5.18: its client is a line behind the store", cluster: walkthrough(), obj: deployment(kvv1.EngineSGLang, "0.5.18", false),
			warn: admission.Warnings{skew("SGLang", "0.5.18", "0.3.12.post1", "0.3.12")}},
		{name: "SGLang 0.5.20 still takes fp4_e2m1", cluster: withDtype("fp4_e2m1"), obj: deployment(kvv1.EngineSGLang, "0.5.20", false),
			warn: admission.Warnings{unknownClient("SGLang", "0.5.20", "unknown: sglang-0.5.20.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "SGLang 0.5.21 dropped fp4_e2m1", cluster: withDtype("fp4_e2m1"), obj: deployment(kvv1.EngineSGLang, "0.5.21", false),
			want: []string{`spec.kvCache.poolRef.name: Invalid value: "team-a": KVCachePoolBinding team-a/team-a has the dtype "fp4_e2m1", which SGLang 0.5.21 does not accept for --kv-cache-dtype, so the engine would exit at start on an argument error; SGLang 0.5.21 accepts auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16: attach through a Binding whose domain's dtype it accepts (a domain is immutable, so another dtype needs another Binding), or run a release of SGLang that accepts "fp4_e2m1": 0.5.18, 0.5.19, 0.5.20`},
			warn: admission.Warnings{unknownClient("SGLang", "0.5.21", "unknown: sglang-0.5.21.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "SGLang 0.5.23", cluster: walkthrough(), obj: deployment(kvv1.EngineSGLang, "0.5.23", false),
			warn: admission.Warnings{unknownClient("SGLang", "0.5.23", "unknown: sglang-0.5.23.dist-info/METADATA declares no Mooncake requirement")}},
		{name: "vLLM-Ascend 0.23.0: its client is two lines behind the store", cluster: ascendCluster(), obj: deployment(kvv1.EngineVLLM, "0.23.0", true),
			warn: admission.Warnings{onAscendServer + skew("vLLM-Ascend", "0.23.0", "0.3.11.post1", "0.3.11")}},
		{name: "vLLM-Ascend 0.18.0 is refused", cluster: ascendCluster(), obj: deployment(kvv1.EngineVLLM, "0.18.0", true),
			want: []string{`spec.engine.version: Invalid value: "0.18.0": ` + onAscendServer + `vLLM-Ascend 0.18.0 (spec.engine.version) is not supported: its vLLM 0.18.0 has no --kv-cache-dtype-skip-layers, so that vLLM reads --kv-cache-d through --kv-cache-dtyp as --kv-cache-dtype while admission reads them as ambiguous: a container's own dtype would pass unrefused; run a release injection supports: vLLM-Ascend 0.23.0, 0.23.0.post1`},
			warn: admission.Warnings{onAscendServer + skew("vLLM-Ascend", "0.18.0", "0.3.9", "0.3.9")}},
		{name: "vLLM 0.34.0, newer than the table, is admitted with what to check", cluster: walkthrough(), obj: deployment(kvv1.EngineVLLM, "0.34.0", false),
			warn: admission.Warnings{"vLLM 0.34.0 (spec.engine.version) is newer than 0.33.0, the newest release this project has read, so nothing here proves that its Mooncake reader accepts the injected configuration or that its parser reads the flags injection writes; check it: once its Pods run, `kvcache check` and the Binding's CacheInUse condition say whether it writes, and `python3 -c \"import <module>\"` in its image must succeed for the reader of vLLM (vllm.distributed.mooncake_store (0.31.0 to 0.33.0); vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker (0.29.0 to 0.30.0)); hack/engines.sh adds the release to the table"}},
	}
	runVTCases(t, tests, func(r objects.Reader) admission.Validator[*kvv1.ModelDeployment] {
		return &ModelDeploymentValidator{Reader: r}
	})
}
