package scale_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// tracked are the resources whose every change the steady-state window records, so that each
// write the audit log shows can be explained by what it changed.
var tracked = []struct {
	gvr       schema.GroupVersionResource
	namespace string
}{
	{schema.GroupVersionResource{Group: "worker.gpustack.ai", Version: "v1", Resource: "kvcachebackends"}, ""},
	{schema.GroupVersionResource{Group: "worker.gpustack.ai", Version: "v1", Resource: "kvcachepools"}, ""},
	{schema.GroupVersionResource{Group: "worker.gpustack.ai", Version: "v1", Resource: "kvcachepoolbindings"}, ""},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, systemNamespace},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, systemNamespace},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, systemNamespace},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, systemNamespace},
	{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, systemNamespace},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, systemNamespace},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, systemNamespace},
}

// change is one observed change of a tracked object.
type change struct {
	resource string // group/resource
	object   string
	event    watch.EventType
	diff     []string // "path: old -> new"
}

// shape is the diff's paths without values: changes of the same shape have the same cause.
func (c change) shape() string {
	paths := make([]string, len(c.diff))
	for i, d := range c.diff {
		paths[i], _, _ = strings.Cut(d, ": ")
	}
	return c.resource + " " + string(c.event) + " {" + strings.Join(paths, ", ") + "}"
}

// changeRecorder watches the tracked resources and records every change with its diff.
type changeRecorder struct {
	mu      sync.Mutex
	changes []change
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func recordChanges(ctx context.Context, dyn dynamic.Interface) (*changeRecorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &changeRecorder{cancel: cancel}
	for _, tr := range tracked {
		ri := dyn.Resource(tr.gvr).Namespace(tr.namespace)
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("list %s: %w", tr.gvr.Resource, err)
		}
		last := map[string]map[string]string{}
		for i := range list.Items {
			last[objectKey(&list.Items[i])] = flatten(list.Items[i].Object)
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watch %s: %w", tr.gvr.Resource, err)
		}
		res := tr.gvr.Group + "/" + tr.gvr.Resource
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						continue
					}
					k := objectKey(u)
					now := flatten(u.Object)
					var d []string
					if ev.Type != watch.Deleted {
						d = diff(last[k], now)
						last[k] = now
					} else {
						delete(last, k)
					}
					r.mu.Lock()
					r.changes = append(r.changes, change{resource: res, object: k, event: ev.Type, diff: d})
					r.mu.Unlock()
				}
			}
		}()
	}
	return r, nil
}

// stop ends the watches and returns what they saw.
func (r *changeRecorder) stop() []change {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]change(nil), r.changes...)
}

func objectKey(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// flatten turns an object into path -> value, lists of conditions keyed by type and lists of
// named items by name, without the fields every write changes (resourceVersion, managedFields).
func flatten(o map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, c := range t {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				if p == "metadata.resourceVersion" || p == "metadata.managedFields" {
					continue
				}
				walk(p, c)
			}
		case []any:
			for i, c := range t {
				idx := fmt.Sprint(i)
				if m, ok := c.(map[string]any); ok {
					if s, ok := m["type"].(string); ok {
						idx = s
					} else if s, ok := m["name"].(string); ok {
						idx = s
					}
				}
				walk(fmt.Sprintf("%s[%s]", prefix, idx), c)
			}
			if len(t) == 0 {
				out[prefix] = "[]"
			}
		default:
			out[prefix] = fmt.Sprint(t)
		}
	}
	walk("", o)
	return out
}

func diff(old, now map[string]string) []string {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range now {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		o, inOld := old[k]
		n, inNew := now[k]
		if inOld && inNew && o == n {
			continue
		}
		if !inOld {
			o = "(absent)"
		}
		if !inNew {
			n = "(absent)"
		}
		out = append(out, fmt.Sprintf("%s: %s -> %s", k, trunc(o, 160), trunc(n, 160)))
	}
	sort.Strings(out)
	return out
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// explain groups changes by shape: "count  shape" and one example diff of each.
func explain(changes []change) []string {
	type group struct {
		n       int
		example change
		objects map[string]bool
	}
	groups := map[string]*group{}
	for _, c := range changes {
		s := c.shape()
		if groups[s] == nil {
			groups[s] = &group{example: c, objects: map[string]bool{}}
		}
		groups[s].n++
		groups[s].objects[c.object] = true
	}
	shapes := make([]string, 0, len(groups))
	for s := range groups {
		shapes = append(shapes, s)
	}
	sort.Slice(shapes, func(i, j int) bool { return groups[shapes[i]].n > groups[shapes[j]].n })
	var out []string
	for _, s := range shapes {
		g := groups[s]
		out = append(out, fmt.Sprintf("%d change(s) on %d object(s): %s", g.n, len(g.objects), s))
		if len(g.example.diff) == 0 {
			out = append(out, "    e.g. "+g.example.object+": no field changed besides resourceVersion/managedFields")
		}
		for i, d := range g.example.diff {
			if i == 8 {
				out = append(out, fmt.Sprintf("    ... %d more", len(g.example.diff)-i))
				break
			}
			out = append(out, "    e.g. "+g.example.object+" "+d)
		}
	}
	return out
}

// secs formats a duration for the report.
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
