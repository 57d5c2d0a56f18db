package injection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// LeftAlone says why a Pod that carries annotations of the contract is never injected although
// it looks meant to be: its inject label has a value other than "true" and the opt-out "false"
// ("True", "1", "yes"), which the webhook's objectSelector does not match, so the webhook never
// sees it; or the opt-in is written as an annotation. "" for every other Pod: opted in, opted out
// ("false", or no label), or carrying no key of the contract. kvcache check fails such a Pod and
// kvcache inject warns, since admission says nothing.
func LeftAlone(pod *corev1.Pod) string {
	var keys []string
	for k := range pod.Annotations {
		if strings.HasPrefix(strings.ToLower(k), vocab.Prefix) && k != vocab.LabelInject {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	carries := "carries no other key of the contract"
	if len(keys) > 0 {
		carries = "carries " + strings.Join(keys, ", ")
	}
	v, labelled := pod.Labels[vocab.LabelInject]
	switch {
	case labelled && v != "true" && v != "false" && len(keys) > 0:
		return fmt.Sprintf("label %s is %q, and only \"true\" opts in (the webhook's objectSelector matches that value alone, so it never sees this Pod): the Pod is never injected though it %s; set the label to \"true\" to opt in, or to \"false\" (or remove it and the annotations) to opt out", vocab.LabelInject, v, carries)
	case !labelled && pod.Annotations[vocab.LabelInject] != "" && pod.Annotations[vocab.LabelInject] != "false":
		return fmt.Sprintf("%s is an annotation here, and the opt-in is a label (a webhook's objectSelector matches labels only): the Pod is never injected though it %s; move it to metadata.labels with the value \"true\"", vocab.LabelInject, carries)
	}
	return ""
}

// Unlabelled says that a Pod carries the annotations that name a Binding or an engine and no
// inject label at all: the webhook leaves it alone. Dropping the label is a documented opt-out
// (and leaves the annotations behind), so this is a warning, never a refusal or a failure: it
// says what to write for either meaning, and the label "false" makes the opt-out explicit. ""
// for every other Pod.
func Unlabelled(pod *corev1.Pod) string {
	if _, labelled := pod.Labels[vocab.LabelInject]; labelled || pod.Annotations[vocab.LabelInject] != "" {
		return ""
	}
	var keys []string
	for _, k := range []string{vocab.AnnotationBinding, vocab.AnnotationEngine} {
		if _, ok := pod.Annotations[k]; ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf("the Pod carries %s but no label %s, so the webhook leaves it alone and its engine gets no cache: to opt in, add the label %s: \"true\"; if it opted out by dropping the label, set it to \"false\" to say so (or remove the annotations)",
		strings.Join(keys, " and "), vocab.LabelInject, vocab.LabelInject)
}

// Misplaced says why a workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob)
// whose own metadata carries the opt-in label or an annotation of the contract is never
// injected when its Pod template opts in to nothing: the webhook sees the Pods the workload
// creates, whose labels and annotations are the template's (at templatePath). "" when the
// template opts in or out itself, or the workload's metadata carries no key of the contract. kvcache inject
// warns and kvcache check fails, since neither admission nor the workload says anything.
func Misplaced(kind string, workload metav1.Object, template *corev1.Pod, templatePath string) string {
	if v, ok := template.Labels[vocab.LabelInject]; ok && (v == "true" || v == "false") {
		return "" // the template opts in, or out, itself
	}
	var keys []string
	if v, ok := workload.GetLabels()[vocab.LabelInject]; ok {
		keys = append(keys, fmt.Sprintf("the label %s: %q", vocab.LabelInject, v))
	}
	var annotations []string
	for k := range workload.GetAnnotations() {
		if strings.HasPrefix(strings.ToLower(k), vocab.Prefix) {
			annotations = append(annotations, k)
		}
	}
	sort.Strings(annotations)
	if len(annotations) > 0 {
		keys = append(keys, "the annotations "+strings.Join(annotations, ", "))
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf("the %s's own metadata carries %s, which the webhook never reads: it injects the Pods the %s creates, whose labels and annotations come from %s.metadata; move them there (the label %s: \"true\" under %s.metadata.labels)",
		kind, strings.Join(keys, " and "), kind, templatePath, vocab.LabelInject, templatePath)
}

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

// inject resolves the Binding unless pre carries it, checks the container and its launch as
// the process will receive them, and computes the patch that merges the fragment into pod.
//
// The Binding is resolved first because the launch line is judged as the kubelet hands it to
// the engine: $(NAME) in command and args expanded from the env as injection leaves it, so a
// variable injection writes counts with the value it writes.
func (i *Injector) inject(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader, a annotations, c *corev1.Container, dtypeOwned bool, pre *attached) (Result, error) {
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
	release := ContainerRelease(a.engine, c)
	releaseWarning, rf := JudgeRelease(release, fmt.Sprintf("the tag of image %s of container %q", c.Image, c.Name))
	if rf != nil {
		return Result{}, rf
	}
	if dtypeOwned {
		if rf := Dtype(release, res.Binding); rf != nil {
			return Result{}, rf
		}
	}
	argv := engines.NewEnvironment(frag.EnvOf(c), c.EnvFrom).Expand(slices.Concat(c.Command, c.Args))
	command, args := engines.Texts(argv[:len(c.Command)]), engines.Texts(argv[len(c.Command):])
	if rf := checkContainer(a, pod, c, argv, dtypeOwned); rf != nil {
		return Result{}, rf
	}
	launch, lr := engines.CheckLaunch(command, args, a.engine.Program, a.engine.OtherPrograms(), a.forwarded)
	if lr != nil {
		return Result{}, &Refusal{Reason: lr.Class, Message: fmt.Sprintf("container %q: %s", c.Name, lr.Message)}
	}
	var msgs []string
	reason := ""
	for _, u := range engines.Unseen(argv, launch.ArgsAt) {
		msgs = append(msgs, a.engine.UnseenMessage(argWhere(u.Index, len(c.Command)), u))
		reason = engines.ClassUnseenValue
	}
	for _, f := range a.engine.CheckLaunchEnv(launch) {
		msgs = append(msgs, f.Message)
		if reason == "" {
			reason = f.Class
		}
	}
	if len(msgs) > 0 {
		return Result{}, &Refusal{Reason: reason, Message: fmt.Sprintf("container %q: %s", c.Name, strings.Join(msgs, "; "))}
	}
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
	w := warnings(a.engine, c, frag)
	if releaseWarning != "" {
		w = append([]string{releaseWarning}, w...)
	}
	if hw := hostNetworkWarning(pod, res.Backend); hw != "" {
		w = append(w, hw)
	}
	return Result{Injected: true, Patch: patch, Warnings: w, Record: rec}, nil
}

// argWhere names argument k of command+args (the command holds n) as the container spells it.
func argWhere(k, n int) string {
	if k < n {
		return fmt.Sprintf("command[%d]", k)
	}
	return fmt.Sprintf("args[%d]", k-n)
}

// attach resolves the Pod's Binding and renders its engine's fragment.
func (i *Injector) attach(ctx context.Context, r objects.Reader, namespace string, a annotations, dtypeOwned bool) (*attached, *Refusal, error) {
	res, rf := Resolve(ctx, r, namespace, a.binding, a.engine, NamedByAnnotation)
	if rf != nil {
		return nil, rf, nil
	}
	frag, err := i.renderer.RenderFragment(generator.FragmentInput{Engine: a.engine, CacheInput: res.CacheInput(dtypeOwned), Role: a.role})
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
	// configFileReviewed is the declaration that the file --config names sets no key injection
	// owns or refuses.
	configFileReviewed bool
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
	for _, d := range []struct {
		key string
		to  *bool
	}{{vocab.AnnotationLaunchArgsForwarded, &a.forwarded}, {vocab.AnnotationConfigFileReviewed, &a.configFileReviewed}} {
		switch v, set := ann[d.key]; {
		case !set:
		case v == "true":
			*d.to = true
		default:
			faults = append(faults, fmt.Sprintf("annotation %s: %q is not accepted; the only value is \"true\" (remove the annotation otherwise)", d.key, v))
		}
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
// in any spelling, a file of options admission cannot read (unless the Pod declares it), source
// variables, the offloading flag, a decode half admission cannot tell from its arguments, and
// what would shadow the projected file. argv is the container's command and args as the process
// receives them.
func checkContainer(a annotations, pod *corev1.Pod, c *corev1.Container, argv []engines.Arg, dtypeOwned bool) *Refusal {
	e := a.engine
	var faults []string
	reason := ""
	command, args := engines.Texts(argv[:len(c.Command)]), engines.Texts(argv[len(c.Command):])
	for _, f := range engines.Expanded(e.FindRefusedFlags(command, args, dtypeOwned), c.Command, c.Args) {
		msg := e.Message(f)
		if f.Class == engines.ClassConfigFile {
			if a.configFileReviewed {
				continue
			}
			msg += fmt.Sprintf(`, or, if the file sets none of them, declare %s: "true"`, vocab.AnnotationConfigFileReviewed)
		}
		faults = append(faults, msg)
		if reason == "" {
			reason = f.Class
		}
	}
	if _, at := e.DisaggregationMode(engines.Texts(argv)); at >= 0 && len(argv[at].Refs) > 0 {
		r := argv[at].Refs[0]
		faults = append(faults, fmt.Sprintf("the value of %s in %s %q is env %s, whose value comes from %s, which admission cannot read, and it decides what injection appends: %s, or on a decode half (which %s refuses together with that flag) %s; write the mode in the argument itself, or give %s a literal value in env",
			engines.DisaggregationModeFlag, argWhere(at, len(c.Command)), argv[at].Text, r.Name, r.Source, e.HierarchicalCacheFlag, e.Name,
			strings.Join(e.ManagedTail([]string{engines.DisaggregationModeFlag, engines.DisaggregationModeOf(engines.RoleDecode)}), " "), r.Name))
		if reason == "" {
			reason = engines.ClassUnseenValue
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
			if msg := shadowsConfig(e, m); msg != "" {
				faults = append(faults, msg)
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

// shadowsConfig says why a mount of the container covers what injection projects: a mount at the
// directory, at the file (a subPath mount, say), or anywhere under the directory, which the
// runtime mounts over the projection or cannot create inside its read-only volume. "" for any
// other mount. (A mount at a parent directory is mounted first and does not cover it.)
func shadowsConfig(e engines.Engine, m corev1.VolumeMount) string {
	switch p := path.Clean(m.MountPath); {
	case p == vocab.ConfigMountPath:
		return fmt.Sprintf("volume mount %s at %s is where injection projects the client configuration; mount it elsewhere", m.Name, vocab.ConfigMountPath)
	case p == vocab.ConfigPath:
		return fmt.Sprintf("volume mount %s at %s%s replaces the client configuration injection projects there, so %s would read that file instead of the Binding's; mount it elsewhere", m.Name, m.MountPath, subPathNote(m), e.Name)
	case strings.HasPrefix(p, vocab.ConfigMountPath+"/"):
		return fmt.Sprintf("volume mount %s at %s%s is inside %s, which injection projects read-only with the client configuration: it would cover part of that projection or keep the container from starting; mount it elsewhere", m.Name, m.MountPath, subPathNote(m), vocab.ConfigMountPath)
	}
	return ""
}

func subPathNote(m corev1.VolumeMount) string {
	switch {
	case m.SubPath != "":
		return fmt.Sprintf(" (subPath %s)", m.SubPath)
	case m.SubPathExpr != "":
		return fmt.Sprintf(" (subPathExpr %s)", m.SubPathExpr)
	}
	return ""
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

// hostNetworkWarning says that a Pod on the host network cannot be admitted by its store's
// NetworkPolicy, which admits the Pods of the Bindings' namespaces by their Pod addresses: a
// host-network Pod's traffic leaves from its node's address, which most network plugins judge as
// the node's, so the store may refuse its every connection. "" when the Pod is not on the host
// network or the store has no policy.
func hostNetworkWarning(pod *corev1.Pod, b *kvv1.KVCacheBackend) string {
	if !pod.Spec.HostNetwork || b == nil || generator.WhyNoNetworkPolicy(b) != "" {
		return ""
	}
	return fmt.Sprintf("the Pod runs on the host network (spec.hostNetwork), and KVCacheBackend %s's NetworkPolicy admits the Pods of the Bindings' namespaces by their Pod addresses: this Pod's connections leave from its node's address, which the network plugin may refuse, and then the engine starts and caches nothing; run it off the host network, or set spec.connection.managed.networkPolicy.enabled: false on the backend (any Pod the network lets through can then reach the store)", b.Name)
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

// ObjectMissing reports whether the refusal is for a Binding, pool or backend that does not
// exist: offline, where the objects were read from files, the files may only lack it.
func (r *Refusal) ObjectMissing() bool {
	for _, reason := range breakReasons {
		if r.Reason == reason {
			return true
		}
	}
	return false
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
func warnings(e engines.Engine, c *corev1.Container, frag *engines.Fragment) []string {
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
		w = append(w, envFromWarning(e, c, frag))
	}
	return w
}

// envFromWarning says what envFrom does on an injected container: env wins over it, so every
// variable injection writes in env is read from there and a value of the same name in a
// ConfigMap or Secret is not used; a variable that selects the configuration source and that
// injection does not write would still be read from envFrom, unseen.
func envFromWarning(e engines.Engine, c *corev1.Container, frag *engines.Fragment) string {
	var written []string
	for _, v := range frag.Env {
		written = append(written, v.Name)
	}
	for _, v := range frag.DefaultEnv {
		if !slices.ContainsFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == v.Name }) {
			written = append(written, v.Name)
		}
	}
	msg := fmt.Sprintf("container %q uses envFrom, and env wins over envFrom: injection writes %s in env, so a value of those names supplied through envFrom is not used",
		c.Name, strings.Join(written, ", "))
	var unseen []string
	for _, n := range e.SourceEnv {
		if !slices.Contains(written, n) {
			unseen = append(unseen, n)
		}
	}
	if len(unseen) == 0 {
		return msg
	}
	return msg + fmt.Sprintf("; %s is not written, and supplied through envFrom it would make %s read its store configuration elsewhere and leave every injected value unread, where admission cannot see it: keep it out of the ConfigMaps and Secrets this container reads through envFrom",
		strings.Join(unseen, ", "), e.Name)
}
