package injection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

var sprintf = fmt.Sprintf

// Result is what an admitted Pod comes with.
type Result struct {
	// Injected is false for a Pod that did not opt in (it is left unchanged).
	Injected bool
	// Patch is every change injection makes to the Pod; empty for a Pod that did not opt in or
	// that arrives carrying exactly what injection writes. The webhook answers with it, the CLI
	// applies it at the pod template's path.
	Patch engines.Patch
	// Warnings for the user (kubectl prints them; the CLI writes them to stderr).
	Warnings []string
	// Record is the decision written to kvcache.gpustack.ai/injected.
	Record Record
}

// Apply returns a copy of pod with the result's patch applied: the Pod as admission leaves it.
func (r Result) Apply(pod *corev1.Pod) (*corev1.Pod, error) { return r.Patch.ApplyToPod(pod) }

// Injector holds the renderer the fragments come from.
type Injector struct {
	renderer *generator.Renderer
}

// New returns an injector rendering with r.
func New(r *generator.Renderer) *Injector { return &Injector{renderer: r} }

// OptedIn reports whether a Pod carries the opt-in label with the value "true".
func OptedIn(pod *corev1.Pod) bool { return pod.Labels[vocab.LabelInject] == "true" }

// Inject decides a Pod: the patch that gives it its engine's client configuration, with the
// record and the warnings. A Pod that did not opt in gets Result.Injected false and no patch. A
// refused Pod yields a *Refusal. pod is never modified. namespace is the Pod's namespace
// (admission requests may carry it outside the object).
func (i *Injector) Inject(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader) (Result, error) {
	if !OptedIn(pod) {
		return Result{}, nil
	}
	a, rf := readAnnotations(pod)
	if rf != nil {
		return Result{}, rf
	}
	c, rf := chooseContainer(pod, a.container)
	if rf != nil {
		return Result{}, rf
	}
	dtypeOwned, err := objects.DtypeOwned(ctx, r)
	if err != nil {
		return Result{}, readFailed(err)
	}
	if a.written {
		return i.resubmitted(ctx, pod, namespace, r, a, c.Name, dtypeOwned)
	}
	return i.inject(ctx, pod, namespace, r, a, c, dtypeOwned, nil)
}

// attached is a resolution made before the checks (a resubmitted Pod is stripped by what its
// Binding resolves to), so inject does not resolve twice.
type attached struct {
	res  Attachment
	frag *engines.Fragment
}

// inject checks the container and its launch, resolves the Binding unless pre carries it, and
// computes the patch that merges the fragment into pod.
func (i *Injector) inject(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader, a annotations, c *corev1.Container, dtypeOwned bool, pre *attached) (Result, error) {
	if rf := checkContainer(a.engine, pod, c, dtypeOwned); rf != nil {
		return Result{}, rf
	}
	launch, lr := engines.CheckLaunch(c.Command, c.Args, a.engine.Program, a.engine.OtherPrograms(), a.forwarded)
	if lr != nil {
		return Result{}, &Refusal{Reason: lr.Class, Message: fmt.Sprintf("container %q: %s", c.Name, lr.Message)}
	}
	if fs := a.engine.CheckLaunchEnv(launch); len(fs) > 0 {
		msgs := make([]string, len(fs))
		for i, f := range fs {
			msgs[i] = f.Message
		}
		return Result{}, &Refusal{Reason: fs[0].Class, Message: fmt.Sprintf("container %q: %s", c.Name, strings.Join(msgs, "; "))}
	}
	if pre == nil {
		var rf *Refusal
		var err error
		if pre, rf, err = i.attach(ctx, r, namespace, a, dtypeOwned); rf != nil {
			return Result{}, rf
		} else if err != nil {
			return Result{}, err
		}
	}
	res, frag := pre.res, pre.frag
	rec := Record{
		Binding:             a.binding,
		Engine:              a.engine.ID,
		Vehicle:             string(a.engine.Vehicle),
		Domain:              res.Domain,
		TenantInjected:      true,
		LaunchProgram:       launch.Program,
		LaunchArgsForwarded: launch.Forwarded,
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return Result{}, err
	}
	patch := a.engine.Edits(pod, containerIndex(pod, c.Name), frag, map[string]string{vocab.AnnotationInjected: string(b)})
	return Result{Injected: true, Patch: patch, Warnings: warnings(a.engine, c), Record: rec}, nil
}

// attach resolves the Pod's Binding and renders its engine's fragment.
func (i *Injector) attach(ctx context.Context, r objects.Reader, namespace string, a annotations, dtypeOwned bool) (*attached, *Refusal, error) {
	res, rf := Resolve(ctx, r, namespace, a.binding, a.engine, NamedByAnnotation)
	if rf != nil {
		return nil, rf, nil
	}
	if dtypeOwned {
		if rf := Dtype(a.engine, res.Binding); rf != nil {
			return nil, rf, nil
		}
	}
	ci := res.CacheInput(dtypeOwned)
	frag, err := i.renderer.RenderFragment(generator.FragmentInput{Engine: a.engine, Master: ci.Master, Protocol: ci.Protocol, Tenant: ci.Tenant, Dtype: ci.Dtype, Role: a.role})
	if err != nil {
		return nil, nil, err
	}
	return &attached{res: res, frag: frag}, nil, nil
}

// annotations are a Pod's parsed contract annotations.
type annotations struct {
	binding   string
	engine    engines.Engine
	role      engines.Role
	container string
	forwarded bool
	// written is true when the Pod arrives carrying a key injection writes (the record or the
	// client configuration): the output of kvcache inject, or a manifest copied from a Pod.
	written bool
}

func readAnnotations(pod *corev1.Pod) (annotations, *Refusal) {
	var a annotations
	var faults []string
	reason := ReasonAnnotation
	keys := make([]string, 0, len(pod.Annotations))
	for k := range pod.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !strings.HasPrefix(strings.ToLower(k), vocab.Prefix) || slices.Contains(acceptedAnnotations, k) {
			continue
		}
		switch strings.ToLower(k) {
		case vocab.AnnotationDomain:
			reason = ReasonDomainAnnotation
			faults = append(faults, fmt.Sprintf("annotation %s is refused: the reuse domain comes from the KVCachePoolBinding, which registers it and carries its ceiling; remove the annotation and name the Binding whose spec.domain you want in %s", k, vocab.AnnotationBinding))
		case vocab.AnnotationInjected, vocab.AnnotationClientConfig:
			if k == strings.ToLower(k) {
				a.written = true
				continue
			}
			faults = append(faults, fmt.Sprintf("annotation %s is not part of the injection contract (a typo would otherwise pass silently); the accepted keys are %s", k, strings.Join(acceptedAnnotations, ", ")))
		default:
			faults = append(faults, fmt.Sprintf("annotation %s is not part of the injection contract (a typo would otherwise pass silently); the accepted keys are %s", k, strings.Join(acceptedAnnotations, ", ")))
		}
	}
	ann := pod.Annotations
	if v, ok := ann[vocab.AnnotationEngine]; !ok || v == "" {
		faults = append(faults, fmt.Sprintf("annotation %s is required: declare the engine (%s); it is never guessed from the image", vocab.AnnotationEngine, strings.Join(engines.Names(), ", ")))
	} else if e, ok := engines.ByName(v); ok {
		a.engine = e
	} else {
		hint := ""
		for _, n := range engines.Names() {
			if strings.EqualFold(n, v) {
				hint = fmt.Sprintf(" (the value is case-sensitive: write %s)", n)
			}
		}
		faults = append(faults, fmt.Sprintf("annotation %s: %q is not an engine; use one of %s%s", vocab.AnnotationEngine, v, strings.Join(engines.Names(), ", "), hint))
	}
	switch v := ann[vocab.AnnotationBinding]; {
	case v == "":
		faults = append(faults, fmt.Sprintf("annotation %s is required: name the KVCachePoolBinding in this namespace that grants the cache", vocab.AnnotationBinding))
	case strings.Contains(v, "/"):
		faults = append(faults, fmt.Sprintf("annotation %s: %q names another namespace; a Pod can only use a KVCachePoolBinding in its own namespace, so give its bare name", vocab.AnnotationBinding, v))
	default:
		a.binding = v
	}
	switch v, set := ann[vocab.AnnotationRole]; {
	case !set:
	case v == string(engines.RolePrefill) || v == string(engines.RoleDecode):
		a.role = engines.Role(v)
	case v == string(kvv1.RoleServer):
		faults = append(faults, fmt.Sprintf("annotation %s: Server is not a value here; for a plain server leave the annotation off (Server is ModelDeployment's spelling of the same thing)", vocab.AnnotationRole))
	default:
		faults = append(faults, fmt.Sprintf("annotation %s: %q is not a role; use Prefill or Decode, or leave the annotation off for a plain server", vocab.AnnotationRole, v))
	}
	a.container = ann[vocab.AnnotationContainer]
	switch v, set := ann[vocab.AnnotationLaunchArgsForwarded]; {
	case !set:
	case v == "true":
		a.forwarded = true
	default:
		faults = append(faults, fmt.Sprintf("annotation %s: %q is not accepted; the only value is \"true\" (remove the annotation otherwise)", vocab.AnnotationLaunchArgsForwarded, v))
	}
	if len(faults) > 0 {
		return a, &Refusal{Reason: reason, Message: strings.Join(faults, "; ")}
	}
	return a, nil
}

func chooseContainer(pod *corev1.Pod, name string) (*corev1.Container, *Refusal) {
	names := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	if name == "" {
		switch len(pod.Spec.Containers) {
		case 0:
			return nil, refuse(ReasonContainer, "the Pod has no containers to inject into")
		case 1:
			return &pod.Spec.Containers[0], nil
		default:
			return nil, refuse(ReasonContainer, "the Pod has %d containers (%s): name the engine's with annotation %s; injection never picks one", len(names), strings.Join(names, ", "), vocab.AnnotationContainer)
		}
	}
	if c := containerByName(pod, name); c != nil {
		return c, nil
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return nil, refuse(ReasonContainer, "annotation %s names %q, an init container; name the engine's container, one of %s", vocab.AnnotationContainer, name, strings.Join(names, ", "))
		}
	}
	return nil, refuse(ReasonContainer, "annotation %s names %q, which is not a container of this Pod; use one of %s", vocab.AnnotationContainer, name, strings.Join(names, ", "))
}

func containerByName(pod *corev1.Pod, name string) *corev1.Container {
	if i := containerIndex(pod, name); i >= 0 {
		return &pod.Spec.Containers[i]
	}
	return nil
}

func containerIndex(pod *corev1.Pod, name string) int {
	return slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
}

// checkContainer refuses keys the container may not carry: owned and configuration-source flags
// in any spelling, source variables, the offloading flag, and the projected file's names.
func checkContainer(e engines.Engine, pod *corev1.Pod, c *corev1.Container, dtypeOwned bool) *Refusal {
	var faults []string
	reason := ""
	for _, f := range e.FindRefusedFlags(c.Command, c.Args, dtypeOwned) {
		faults = append(faults, e.Message(f))
		if reason == "" {
			reason = f.Class
		}
	}
	for _, v := range c.Env {
		if slices.Contains(e.OverrideEnv, v.Name) {
			faults = append(faults, e.OverrideEnvMessage(v.Name))
			if reason == "" {
				reason = engines.ClassOwnedKey
			}
		}
		if slices.Contains(e.SourceEnv, v.Name) {
			faults = append(faults, fmt.Sprintf("env %s selects where %s reads its store configuration from, which would leave every injected value unread; remove it and let the Binding configure the store", v.Name, e.Name))
			if reason == "" {
				reason = engines.ClassConfigSource
			}
		}
	}
	if e.VLLMFamily() {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vocab.ConfigVolume {
				faults = append(faults, fmt.Sprintf("volume %s is the name injection gives the projected client configuration; rename the Pod's volume", v.Name))
			}
		}
		for _, m := range c.VolumeMounts {
			if strings.TrimSuffix(m.MountPath, "/") == vocab.ConfigMountPath {
				faults = append(faults, fmt.Sprintf("volume mount %s at %s is where injection projects the client configuration; mount it elsewhere", m.Name, vocab.ConfigMountPath))
			}
		}
		if reason == "" && len(faults) > 0 {
			reason = ReasonConfigVolume
		}
	}
	if len(faults) > 0 {
		return &Refusal{Reason: reason, Message: fmt.Sprintf("container %q: %s", c.Name, strings.Join(faults, "; "))}
	}
	return nil
}

// Attachment is what a Binding resolves to for one engine: the chain Binding -> pool ->
// backend, the store address and the transport. Pod injection and ModelDeployments resolve
// through it.
type Attachment struct {
	Binding  *kvv1.KVCachePoolBinding
	Pool     *kvv1.KVCachePool
	Backend  *kvv1.KVCacheBackend
	Domain   string
	Master   string
	Protocol string
	// TenantLedger is false when the backend keeps no tenant ledger: the tenant is still written
	// (the Binding owns it), and the master ignores it.
	TenantLedger bool
}

// CacheInput is the generator's view of an attachment.
func (a Attachment) CacheInput(dtypeOwned bool) generator.CacheInput {
	c := generator.CacheInput{Master: a.Master, Protocol: a.Protocol, Tenant: a.Domain}
	if dtypeOwned {
		c.Dtype = a.Binding.Spec.Domain.Dtype
	}
	return c
}

// Resolve follows a Binding in namespace ns to the store (objects.Walk), refusing every link
// that would leave an engine starting normally and caching nothing: a missing or deleting
// Binding, pool or backend, a pool whose ledger is not confirmed or that has no endpoint yet, a
// transport the engine cannot use. namedBy is the field that names the Binding, for the fix a
// refusal states (a Pod's annotation, a ModelDeployment's poolRef).
func Resolve(ctx context.Context, r objects.Reader, ns, binding string, e engines.Engine, namedBy string) (Attachment, *Refusal) {
	var att Attachment
	chain, br, err := objects.Walk(ctx, r, ns, binding, namedBy, true)
	att.Binding, att.Pool, att.Backend = chain.Binding, chain.Pool, chain.Backend
	if chain.Binding != nil {
		att.Domain = chain.Binding.DomainName()
	}
	if err != nil {
		return att, readFailed(err)
	}
	if chain.Binding != nil && chain.Binding.DeletionTimestamp != nil {
		return att, refuse(ReasonBindingDeleting, "KVCachePoolBinding %s/%s is being deleted, so new Pods may not attach to it; name another Binding", ns, binding)
	}
	if br != nil {
		return att, &Refusal{Reason: breakReasons[br.Link], Message: br.Message}
	}
	p, poolName := chain.Pool, chain.Pool.Name
	cond := meta.FindStatusCondition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)
	switch {
	case cond == nil:
		return att, refuse(ReasonLedgerNotAvailable, "KVCachePool %q has not reported %s yet, so the tenant this Pod would write under cannot be confirmed; retry once the operator has reconciled the pool (kubectl get kvcp %s)", poolName, kvv1.ConditionQuotaLedgerAvailable, poolName)
	case cond.Status == "True":
		att.TenantLedger = true
	case cond.Status == "False" && cond.Reason == kvv1.ReasonMultiTenancyDisabled:
	default:
		return att, refuse(ReasonLedgerNotAvailable, "KVCachePool %q reports %s=%s (%s: %s), so the tenant this Pod would write under cannot be confirmed; fix the pool's backend or retry when the condition is True", poolName, kvv1.ConditionQuotaLedgerAvailable, cond.Status, cond.Reason, cond.Message)
	}
	if p.Status.ClientEndpoint == "" {
		return att, refuse(ReasonNoEndpoint, "KVCachePool %q has no clientEndpoint yet, so there is no store address to hand the engine; retry once the operator has reconciled the pool (kubectl get kvcp %s)", poolName, poolName)
	}
	att.Master = p.Status.ClientEndpoint
	protocol, rf := Transport(e, chain.Backend, poolName)
	if rf != nil {
		return att, rf
	}
	att.Protocol = protocol
	return att, nil
}

// breakReasons are the refusal reasons of the links objects.Walk reports.
var breakReasons = map[string]string{
	objects.LinkBinding: ReasonBindingNotFound,
	objects.LinkPool:    ReasonPoolNotFound,
	objects.LinkBackend: ReasonBackendNotFound,
}

// The fields that name a Binding, for Resolve's messages.
const (
	NamedByAnnotation = "annotation " + vocab.AnnotationBinding
	NamedByPoolRef    = "spec.kvCache.poolRef.name"
)

// Offer is a transport a backend's member group offers.
type Offer struct {
	// Protocol in store spelling.
	Protocol string
	// Groups are the member groups offering it ("members[0]"), or "spec.transport" for an
	// external backend.
	Groups []string
}

// Offers lists the distinct effective protocols of a backend's member groups in group order.
func Offers(b *kvv1.KVCacheBackend) []Offer {
	var out []Offer
	add := func(p, where string) {
		for i := range out {
			if out[i].Protocol == p {
				out[i].Groups = append(out[i].Groups, where)
				return
			}
		}
		out = append(out, Offer{Protocol: p, Groups: []string{where}})
	}
	if m := b.Spec.Connection.Managed; m != nil && len(m.Members) > 0 {
		for i := range m.Members {
			add(b.EffectiveProtocol(i).StoreSpelling(), fmt.Sprintf("members[%d]", i))
		}
		return out
	}
	add(b.EffectiveProtocol(-1).StoreSpelling(), "spec.transport")
	return out
}

func describeOffers(offers []Offer) string {
	parts := make([]string, len(offers))
	for i, o := range offers {
		parts[i] = fmt.Sprintf("%s (%s)", o.Protocol, strings.Join(o.Groups, ", "))
	}
	return strings.Join(parts, ", ")
}

// Transport checks that an engine can use a backend's transport and returns it in store
// spelling. ModelDeployment validation calls it too.
func Transport(e engines.Engine, b *kvv1.KVCacheBackend, pool string) (string, *Refusal) {
	offers := Offers(b)
	if e.Transports != nil {
		if len(offers) == 1 && e.AcceptsTransport(offers[0].Protocol) {
			return offers[0].Protocol, nil
		}
		var got []string
		for _, o := range offers {
			got = append(got, o.Protocol)
		}
		want := e.Transports[0]
		fix := fmt.Sprintf("set spec.transport.protocol: %s on KVCacheBackend %q (or transport.protocol: %s on the member group serving these nodes)", kvv1.APIProtocolFor(want), b.Name, kvv1.APIProtocolFor(want))
		if b.Spec.Connection.Managed == nil {
			// An external store's transport is its operator's; the backend only declares it.
			fix = fmt.Sprintf("if the store behind KVCacheBackend %q serves %s, declare spec.transport.protocol: %s there", b.Name, want, kvv1.APIProtocolFor(want))
		}
		return "", refuse(ReasonTransportUnsupported, "%s accepts only the %s transport and KVCachePool %q offers %s: %s against %s, and the engine would fail at start (MooncakeBackend does not support protocol '%s'); %s, or choose a pool that offers %s",
			e.Name, want, pool, describeOffers(offers), strings.Join(got, "+"), want, got[0], fix, want)
	}
	if len(offers) > 1 {
		return "", refuse(ReasonTransportMixed, "KVCachePool %q offers more than one transport, %s, and a %s client installs only one: a block on a group with another transport fails with NotSupportedTransport; make the backend's groups use one protocol or choose another pool", pool, describeOffers(offers), e.Name)
	}
	return offers[0].Protocol, nil
}

// Dtype checks that an engine's --kv-cache-dtype accepts the Binding's dtype, which injection
// hands over verbatim while it owns the dtype. A Binding itself stays valid: another engine may
// accept its spelling. ModelDeployment validation calls it too.
func Dtype(e engines.Engine, b *kvv1.KVCachePoolBinding) *Refusal {
	dtype := b.Spec.Domain.Dtype
	if e.AcceptsDtype(dtype) {
		return nil
	}
	return refuse(ReasonDtypeUnsupported, "KVCachePoolBinding %s/%s has the dtype %q, which %s does not accept for %s, so the engine would exit at start on an argument error; %s accepts %s: attach through a Binding whose domain's dtype %s accepts (a domain is immutable, so another dtype needs another Binding)",
		b.Namespace, b.Name, dtype, e.Name, engines.DtypeFlag, e.Name, strings.Join(e.KVCacheDtypes, ", "), e.Name)
}

// readFailed refuses on a read that failed (an *objects.ReadError names what it read).
func readFailed(err error) *Refusal {
	what := "the objects injection resolves"
	var re *objects.ReadError
	if errors.As(err, &re) {
		what, err = re.What, re.Err
	}
	return refuse(ReasonLookupFailed, "could not read %s: %v; injection fails closed, retry when the API server answers", what, err)
}

// warnings are the admission warnings an injected container earns.
func warnings(e engines.Engine, c *corev1.Container) []string {
	var w []string
	var set []string
	for _, kind := range []struct {
		name string
		list corev1.ResourceList
	}{{"request", c.Resources.Requests}, {"limit", c.Resources.Limits}} {
		if q, ok := kind.list[corev1.ResourceMemory]; ok {
			set = append(set, fmt.Sprintf("memory %s %s", kind.name, q.String()))
		}
	}
	if len(set) > 0 {
		buf := resource.NewQuantity(e.StagingBuffer, resource.BinarySI).String()
		w = append(w, fmt.Sprintf("container %q sets %s, but the %s store client stages %s of host memory that no resources field shows; add %s to both the memory request and the limit, or the node's bookkeeping undercounts every injected Pod", c.Name, strings.Join(set, " and "), e.Name, buf, buf))
	}
	if len(c.EnvFrom) > 0 {
		w = append(w, fmt.Sprintf("container %q uses envFrom: Mooncake variables supplied there are invisible to admission and overridden by the injected env; declare them in env", c.Name))
	}
	return w
}
