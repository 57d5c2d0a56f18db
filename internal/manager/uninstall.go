package manager

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Blocker is one object of the operator's API that still exists at uninstall.
type Blocker struct {
	Kind, Namespace, Name string
	// Deleting: it is going, and only the operator can release its finalizer.
	Deleting bool
}

func (b Blocker) String() string {
	name := b.Name
	if b.Namespace != "" {
		name = b.Namespace + "/" + b.Name
	}
	if b.Deleting {
		return b.Kind + " " + name + " (deleting)"
	}
	return b.Kind + " " + name
}

// uninstallKinds are the kinds the operator acts on, in the order they should be deleted (each
// names the one after it). InstanceTypes and Settings are configuration the operator only reads.
var uninstallKinds = []struct {
	kind string
	list client.ObjectList
}{
	{"ModelDeployment", &kvv1.ModelDeploymentList{}},
	{"KVCachePoolBinding", &kvv1.KVCachePoolBindingList{}},
	{"KVCachePool", &kvv1.KVCachePoolList{}},
	{"KVCacheBackend", &kvv1.KVCacheBackendList{}},
}

// UninstallBlockers lists every ModelDeployment, KVCachePoolBinding, KVCachePool and
// KVCacheBackend, in the order to delete them.
func UninstallBlockers(ctx context.Context, c client.Reader) ([]Blocker, error) {
	var out []Blocker
	for _, k := range uninstallKinds {
		l := k.list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l); err != nil {
			return nil, fmt.Errorf("list %ss: %w", k.kind, err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			o := it.(client.Object)
			out = append(out, Blocker{Kind: k.kind, Namespace: o.GetNamespace(), Name: o.GetName(), Deleting: !o.GetDeletionTimestamp().IsZero()})
		}
	}
	return out, nil
}

// CheckUninstall is the chart's pre-delete hook. Uninstalling the operator while objects of its
// API exist would strand them: their finalizers (a backend's, a Binding's ledger entry) are
// released only by the operator, the store's Pods would keep running and the tenants stay in the
// store's ledger. So it refuses, naming every object and how to delete them; objects already
// being deleted are waited for, up to wait, since the operator is still there to finish them.
//
// release names the Helm release ("namespace/name", or "" when unknown) and revision its
// current revision, for the way back: a refused uninstall leaves the release "uninstalling",
// which helm upgrade refuses until helm rollback to that revision restores it.
func CheckUninstall(ctx context.Context, c client.Reader, wait time.Duration, release string, revision int, out io.Writer) error {
	deadline := time.Now().Add(wait)
	announced := false
	for {
		blockers, err := UninstallBlockers(ctx, c)
		if err != nil {
			return err
		}
		if len(blockers) == 0 {
			fmt.Fprintln(out, "no ModelDeployment, KVCachePoolBinding, KVCachePool or KVCacheBackend remains: the uninstall may proceed")
			return nil
		}
		allDeleting := true
		for _, b := range blockers {
			allDeleting = allDeleting && b.Deleting
		}
		if !allDeleting || time.Now().After(deadline) {
			return uninstallRefused(blockers, release, revision)
		}
		if !announced {
			fmt.Fprintf(out, "waiting up to %s for the operator to finish deleting: %s\n", wait, joinBlockers(blockers))
			announced = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func joinBlockers(bs []Blocker) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.String()
	}
	return strings.Join(s, ", ")
}

// uninstallRefused is the refusal: what is left, why that blocks, and the two ways on.
func uninstallRefused(bs []Blocker, release string, revision int) error {
	var b strings.Builder
	b.WriteString("uninstall refused: these objects still exist, and only the running operator can release their finalizers (without it the store Pods keep running and the tenants stay in the store's ledger):\n")
	for _, x := range bs {
		fmt.Fprintf(&b, "  %s\n", x)
	}
	b.WriteString("delete them first (kubectl delete -f the manifests that created them, or\n" +
		"  kubectl delete modeldeployments,kvcachepoolbindings --all -A && kubectl delete kvcachepools,kvcachebackends --all),\n" +
		"then run helm uninstall again; helm uninstall --no-hooks uninstalls the operator and leaves them as they are")
	if ns, name, ok := strings.Cut(release, "/"); ok && revision > 0 {
		cmd := fmt.Sprintf("helm rollback %s %d -n %s", name, revision, ns)
		fmt.Fprintf(&b, ";\nto keep the operator instead, %s (helm marks the release uninstalling, and helm upgrade refuses it until then)", cmd)
	}
	return fmt.Errorf("%s", b.String())
}
