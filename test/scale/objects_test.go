package scale_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func backendName(i int) string { return fmt.Sprintf("scale-%03d", i) }
func poolName(i int) string    { return fmt.Sprintf("scale-%03d-pool", i) }
func tenantNS(j int) string    { return fmt.Sprintf("tenant-%02d", j) }

// scaleBackend is the walkthrough's backend (one member group of 8Gi per member), each on its
// own node group so the member DaemonSets spread over ten groups of nodes.
func scaleBackend(i int) *kvv1.KVCacheBackend {
	return &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: backendName(i)},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Members: []kvv1.MemberGroup{{
				NodeSelector:      map[string]string{"kubernetes.io/os": "linux", "scale.kvcache.gpustack.ai/node-group": fmt.Sprintf("g%d", i%10)},
				CapacityPerMember: resource.MustParse("8Gi"),
			}},
		}}},
	}
}

// scalePool divides backend i: 16Gi, of which its Bindings ask 1Gi each.
func scalePool(i int) *kvv1.KVCachePool {
	return &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: poolName(i)}, Spec: kvv1.KVCachePoolSpec{
		Backends: []string{backendName(i)}, Quota: kvv1.PoolQuota{Total: resource.MustParse("16Gi")}}}
}

// scaleBinding is tenant j's Binding on pool i: one per pool in each tenant namespace, a domain
// of its own on the pool's backend, a ceiling of 1Gi (10 of them fit the pool's 16Gi).
func scaleBinding(i, j int) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS(j), Name: poolName(i)}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: poolName(i)}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
		Domain: kvv1.Domain{Name: fmt.Sprintf("%s-chat", tenantNS(j)), BlockSize: 64, Dtype: "bfloat16"}}}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// progress is how many objects of each kind are settled.
type progress struct {
	backends, pools, bindings int
	// phases and reasons seen, for the report.
	backendPhases, poolReasons, bindingReasons map[string]int
}

// settled lists (never per-object Get) and counts what settled: a backend whose status
// observed its generation and has a phase; a pool with QuotaLedgerAvailable; a Binding whose
// ledger finalizer decision is reflected (the finalizer on it and QuotaGranted present).
func settled(ctx context.Context, c client.Client, when func(*settledCheck)) (progress, error) {
	chk := settledCheck{
		backend: func(b *kvv1.KVCacheBackend) bool {
			return b.Status.ObservedGeneration == b.Generation && b.Status.Phase != ""
		},
		pool: func(p *kvv1.KVCachePool) bool {
			return meta.FindStatusCondition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable) != nil
		},
		binding: func(b *kvv1.KVCachePoolBinding) bool {
			return controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) &&
				meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionQuotaGranted) != nil
		},
	}
	if when != nil {
		when(&chk)
	}
	p := progress{backendPhases: map[string]int{}, poolReasons: map[string]int{}, bindingReasons: map[string]int{}}
	backends := &kvv1.KVCacheBackendList{}
	if err := c.List(ctx, backends); err != nil {
		return p, err
	}
	for i := range backends.Items {
		b := &backends.Items[i]
		if chk.backend(b) {
			p.backends++
		}
		p.backendPhases[string(b.Status.Phase)+"/"+reason(b.Status.Conditions, kvv1.ConditionLeaderAvailable)]++
	}
	pools := &kvv1.KVCachePoolList{}
	if err := c.List(ctx, pools); err != nil {
		return p, err
	}
	for i := range pools.Items {
		if chk.pool(&pools.Items[i]) {
			p.pools++
		}
		p.poolReasons[string(pools.Items[i].Status.Phase)+"/"+reason(pools.Items[i].Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)]++
	}
	bindings := &kvv1.KVCachePoolBindingList{}
	if err := c.List(ctx, bindings); err != nil {
		return p, err
	}
	for i := range bindings.Items {
		if chk.binding(&bindings.Items[i]) {
			p.bindings++
		}
		p.bindingReasons[string(bindings.Items[i].Status.Phase)+"/"+reason(bindings.Items[i].Status.Conditions, kvv1.ConditionQuotaGranted)]++
	}
	return p, nil
}

type settledCheck struct {
	backend func(*kvv1.KVCacheBackend) bool
	pool    func(*kvv1.KVCachePool) bool
	binding func(*kvv1.KVCachePoolBinding) bool
}

func reason(conds []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return c.Reason
	}
	return "-"
}

// unlabelledPod is the smallest valid Pod: no label, nothing the operator looks at.
func unlabelledPod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%05d", i)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
}
