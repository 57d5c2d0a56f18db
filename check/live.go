package check

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The webhooks the chart installs, by the names templates/webhooks gives them.
const (
	WebhookInject = "inject.pods.kvcache.gpustack.ai"
	WebhookFreeze = "freeze.pods.kvcache.gpustack.ai"
	// ManagerLease is the controllers' election Lease, in the system namespace.
	ManagerLease = "kvcache-operator"
	// probeBinding is the Binding the dry-run probe Pod names; it need not exist: the webhook's
	// refusal is the proof that it answered.
	probeBinding = "kvcache-check-probe"
)

// LiveOptions configure a check of a live cluster.
type LiveOptions struct {
	// SystemNamespace is where managed stores and the manager's Lease live.
	SystemNamespace string
	// Namespace limits the namespaced objects checked (Bindings, ModelDeployments, Pods); ""
	// checks every namespace.
	Namespace string
	// ProbeNamespace is where the dry-run probe Pod is created; "default" when empty.
	ProbeNamespace string
	// CertWarning is how close to expiry a certificate earns a warning; 30 days when zero.
	CertWarning time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Injector judges drift with the one injection function.
	Injector *injection.Injector
}

type live struct {
	c   client.Client
	o   LiveOptions
	r   *Report
	now time.Time
}

// Live checks a cluster through c (an uncached client with this project's scheme).
func Live(ctx context.Context, c client.Client, o LiveOptions) (*Report, error) {
	if o.SystemNamespace == "" {
		o.SystemNamespace = generator.DefaultSystemNamespace
	}
	if o.ProbeNamespace == "" {
		o.ProbeNamespace = "default"
		if o.Namespace != "" {
			o.ProbeNamespace = o.Namespace
		}
	}
	if o.CertWarning == 0 {
		o.CertWarning = 30 * 24 * time.Hour
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	l := &live{c: c, o: o, r: &Report{}, now: now()}
	for _, step := range []func(context.Context) error{l.webhooks, l.answers, l.managerLease, l.backends, l.bindings, l.drift, l.leftAlone, l.deployments} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return l.r, nil
}

// webhooks: the two Pod webhooks are configured, each with a CA bundle that verifies the
// certificate its server presents, neither close to expiry.
func (l *live) webhooks(ctx context.Context) error {
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := l.c.List(ctx, mutating); err != nil {
		return fmt.Errorf("list MutatingWebhookConfigurations: %w", err)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := l.c.List(ctx, validating); err != nil {
		return fmt.Errorf("list ValidatingWebhookConfigurations: %w", err)
	}
	type found struct {
		object string
		cfg    admissionregistrationv1.WebhookClientConfig
	}
	var inject, freeze []found
	for _, m := range mutating.Items {
		for _, w := range m.Webhooks {
			if w.Name == WebhookInject {
				inject = append(inject, found{"MutatingWebhookConfiguration/" + m.Name, w.ClientConfig})
			}
		}
	}
	for _, v := range validating.Items {
		for _, w := range v.Webhooks {
			if w.Name == WebhookFreeze {
				freeze = append(freeze, found{"ValidatingWebhookConfiguration/" + v.Name, w.ClientConfig})
			}
		}
	}
	for _, want := range []struct {
		name, kind string
		got        []found
	}{{WebhookInject, "MutatingWebhookConfiguration", inject}, {WebhookFreeze, "ValidatingWebhookConfiguration", freeze}} {
		switch len(want.got) {
		case 0:
			l.r.fail("webhook.configured", want.kind, fmt.Sprintf("No %s holds the webhook %s: Pods are neither injected nor guarded.", want.kind, want.name),
				"install the chart (helm install kvcache charts/kvcache-operator) or re-apply its webhook configurations.")
			continue
		case 1:
			l.r.pass("webhook.configured", want.got[0].object, fmt.Sprintf("Holds the webhook %s.", want.name))
		default:
			var names []string
			for _, g := range want.got {
				names = append(names, g.object)
			}
			l.r.fail("webhook.configured", want.kind, fmt.Sprintf("%d configurations hold the webhook %s (%s): every Pod would be injected once per configuration.", len(want.got), want.name, strings.Join(names, ", ")),
				"uninstall the extra release, or delete the configurations it left behind.")
		}
		for _, g := range want.got {
			if err := l.certificate(ctx, g.object, g.cfg); err != nil {
				return err
			}
		}
	}
	return nil
}

// certificate checks that a webhook's caBundle verifies the serving certificate the Pods behind
// its Service mount, for the Service's DNS name.
func (l *live) certificate(ctx context.Context, object string, cfg admissionregistrationv1.WebhookClientConfig) error {
	const check = "webhook.certificate"
	if len(cfg.CABundle) == 0 {
		l.r.fail(check, object, "The caBundle is empty, so the API server cannot verify the webhook and every call fails.",
			"with webhook.certs.mode self the manager writes it within seconds of starting: check the manager's logs; with cert-manager, check its CA injector.")
		return nil
	}
	roots := x509.NewCertPool()
	cas := parseCerts(cfg.CABundle)
	if len(cas) == 0 {
		l.r.fail(check, object, "The caBundle holds no PEM certificate.", "let the manager (or cert-manager) rewrite it: delete the caBundle field.")
		return nil
	}
	for _, ca := range cas {
		roots.AddCert(ca)
		l.expiry(check, object, "the CA "+ca.Subject.CommonName, ca.NotAfter)
	}
	if cfg.Service == nil {
		l.r.pass(check, object, "The caBundle parses; the webhook is called by URL, so its certificate is not checked here.")
		return nil
	}
	svc := cfg.Service
	serving, where, err := l.servingCertificate(ctx, svc.Namespace, svc.Name)
	if err != nil {
		return err
	}
	if serving == nil {
		l.r.warn(check, object, fmt.Sprintf("Could not find the serving certificate of Service %s/%s (%s), so the caBundle was not checked against it.", svc.Namespace, svc.Name, where),
			"run kvcache check with a user that can read the manager's Pods and Secrets.")
		return nil
	}
	dns := fmt.Sprintf("%s.%s.svc", svc.Name, svc.Namespace)
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: dns, CurrentTime: l.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		l.r.fail(check, object, fmt.Sprintf("The caBundle does not verify the certificate the webhook serves (%s) for %s: %v. The API server refuses every call, so every opted-in Pod is refused.", where, dns, err),
			"restart the manager so it rewrites the caBundle (webhook.certs.mode self), or fix the CA injection of your certificate manager.")
		return nil
	}
	l.r.pass(check, object, fmt.Sprintf("The caBundle verifies the serving certificate (%s) for %s.", where, dns))
	l.expiry(check, object, "the serving certificate", serving.NotAfter)
	return nil
}

// expiry reports a certificate that has expired or will soon.
func (l *live) expiry(check, object, what string, notAfter time.Time) {
	left := notAfter.Sub(l.now)
	switch {
	case left <= 0:
		l.r.fail(check, object, fmt.Sprintf("%s expired on %s.", capitalize(what), notAfter.UTC().Format(time.DateOnly)), "rotate it: restart the manager (self-managed) or renew the Certificate.")
	case left < l.o.CertWarning:
		l.r.warn(check, object, fmt.Sprintf("%s expires on %s, in %d days.", capitalize(what), notAfter.UTC().Format(time.DateOnly), int(left.Hours()/24)), "rotate it before then.")
	}
}

// servingCertificate finds the certificate the Pods behind a Service serve: the Secret mounted
// where the manager's --cert-dir points.
func (l *live) servingCertificate(ctx context.Context, ns, name string) (*x509.Certificate, string, error) {
	svc := &corev1.Service{}
	if err := l.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil, "the Service: " + reason(err), nil
		}
		return nil, "", err
	}
	pods := &corev1.PodList{}
	if err := l.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(svc.Spec.Selector)}); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, "its Pods: " + reason(err), nil
		}
		return nil, "", err
	}
	for _, p := range pods.Items {
		secret := certSecret(&p)
		if secret == "" {
			continue
		}
		s := &corev1.Secret{}
		if err := l.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: secret}, s); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				return nil, "Secret " + ns + "/" + secret + ": " + reason(err), nil
			}
			return nil, "", err
		}
		certs := parseCerts(s.Data[corev1.TLSCertKey])
		if len(certs) == 0 {
			return nil, "Secret " + ns + "/" + secret + " holds no tls.crt", nil
		}
		return certs[0], "Secret " + ns + "/" + secret, nil
	}
	return nil, "no Pod behind it names a certificate Secret (--cert-secret-name) or mounts one at its --cert-dir", nil
}

// certSecret is the Secret a manager Pod serves its certificate from: the one it manages itself
// (--cert-secret-name, self-managed TLS), or the one mounted at its --cert-dir; "" when neither.
func certSecret(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		dir := ""
		for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
			if v, ok := strings.CutPrefix(a, "--cert-dir="); ok {
				dir = v
			}
			if v, ok := strings.CutPrefix(a, "--cert-secret-name="); ok && v != "" {
				return v
			}
		}
		if dir == "" {
			continue
		}
		for _, m := range c.VolumeMounts {
			if strings.TrimSuffix(m.MountPath, "/") != strings.TrimSuffix(dir, "/") {
				continue
			}
			for _, v := range p.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					return v.Secret.SecretName
				}
			}
		}
	}
	return ""
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// answers proves the Pod webhook answers through the API server: a server-side dry-run create
// of an opted-in Pod naming a Binding that does not exist must come back refused by it.
func (l *live) answers(ctx context.Context) error {
	const check = "webhook.answers"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "kvcache-check-", Namespace: l.o.ProbeNamespace,
			Labels:      map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: probeBinding, vocab.AnnotationEngine: "vLLM"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "probe"}}}},
	}
	object := "Namespace/" + l.o.ProbeNamespace
	err := l.c.Create(ctx, pod, client.DryRunAll)
	switch {
	case err == nil:
		l.r.fail(check, object, "A dry-run create of an opted-in Pod naming a Binding that does not exist was admitted: the Pod webhook did not see it.",
			"check the MutatingWebhookConfiguration's objectSelector and namespaceSelector, and that the manager serves "+WebhookInject+".")
	case strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied the request", WebhookInject)):
		l.r.pass(check, object, "A dry-run create of an opted-in Pod reached the Pod webhook through the API server, which answered.")
	case strings.Contains(err.Error(), "failed calling webhook"):
		l.r.fail(check, object, sentence("The API server could not call the Pod webhook: "+err.Error()+"; every opted-in Pod is refused while this lasts"),
			"check that a manager replica is Ready (kubectl -n <release namespace> get pods) and that the caBundle verifies its certificate (webhook.certificate above).")
	case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "admission webhook"):
		l.r.warn(check, object, sentence("The probe could not be created here: "+err.Error()), "run kvcache check with a user that may create Pods in "+l.o.ProbeNamespace+", or pick another namespace with -n.")
	default:
		l.r.fail(check, object, sentence("The dry-run create of an opted-in Pod failed: "+err.Error()), "")
	}
	return nil
}

// managerLease: one manager replica holds the controllers' Lease and renews it.
func (l *live) managerLease(ctx context.Context) error {
	l.lease(ctx, "manager.lease", ManagerLease, "the controllers", "check the manager Pods: kubectl -n <release namespace> get pods, and their logs.")
	return nil
}

// leaseTakeoverWindow is how many Lease durations after its last renewal a Lease may be taken
// over in a healthy handover.
const leaseTakeoverWindow = 2

// lease reports who holds a Lease in the system namespace and how recently it renewed.
func (l *live) lease(ctx context.Context, check, name, what, fix string) {
	object := "Lease/" + l.o.SystemNamespace + "/" + name
	lease := &coordinationv1.Lease{}
	err := l.c.Get(ctx, client.ObjectKey{Namespace: l.o.SystemNamespace, Name: name}, lease)
	switch {
	case apierrors.IsNotFound(err):
		l.r.fail(check, object, fmt.Sprintf("No Lease: nothing has ever led %s.", what), fix)
		return
	case err != nil:
		l.r.warn(check, object, sentence("The Lease could not be read: "+err.Error()), "")
		return
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder == "" {
		l.r.fail(check, object, fmt.Sprintf("Nobody holds the Lease: %s have no leader.", what), fix)
		return
	}
	duration := 15 * time.Second
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	if lease.Spec.RenewTime == nil {
		l.r.fail(check, object, fmt.Sprintf("%s holds the Lease but has never renewed it.", holder), fix)
		return
	}
	age := l.now.Sub(lease.Spec.RenewTime.Time).Round(time.Second)
	// Past its duration, a Lease is free to take: a standby candidate takes it at its next retry,
	// and a restarted holder does after one more duration (its new identity waits the old one
	// out). Within that window a handover is under way, which is a warning, not a fault.
	if age > duration && age <= leaseTakeoverWindow*duration {
		l.r.warn(check, object, fmt.Sprintf("%s last renewed the Lease %s ago, past its %s duration: a handover of %s is under way (a standby or a restarted replica takes it within another %s).", holder, age, duration, what, duration), "run kvcache check again in "+duration.String()+"; "+fix)
		return
	}
	if age > duration {
		l.r.fail(check, object, fmt.Sprintf("%s holds the Lease but last renewed it %s ago, longer than its %s duration: %s have no live leader.", holder, age, duration, what), fix)
		return
	}
	l.r.pass(check, object, fmt.Sprintf("%s leads %s (renewed %s ago).", holder, what, age))
}

// backends: each backend is Ready, its capacity observed, its members mounted on the nodes its
// groups select, and an electing leader's Lease held.
func (l *live) backends(ctx context.Context) error {
	list := &kvv1.KVCacheBackendList{}
	if err := l.c.List(ctx, list); err != nil {
		return fmt.Errorf("list KVCacheBackends: %w", err)
	}
	nodes := &corev1.NodeList{}
	nodesErr := l.c.List(ctx, nodes)
	for i := range list.Items {
		b := &list.Items[i]
		b.Default()
		object := "KVCacheBackend/" + b.Name
		switch b.Status.Phase {
		case kvv1.PhaseReady:
			l.r.pass("backend.ready", object, "Ready.")
		default:
			l.r.fail("backend.ready", object, sentence(fmt.Sprintf("Phase %s: %s", orUnknown(string(b.Status.Phase)), b.Status.PhaseMessage)), "kubectl describe kvcb "+b.Name+" names the condition that is not True.")
		}
		if b.Status.Capacity == nil {
			l.r.fail("backend.capacity", object, "No capacity observed: the store has not answered, or no member has registered a segment.", "kubectl describe kvcb "+b.Name+": CapacityObserved and MembersMounted say which.")
		} else {
			l.r.pass("backend.capacity", object, fmt.Sprintf("Capacity %s observed from the store.", b.Status.Capacity.Total.String()))
		}
		m := b.Spec.Connection.Managed
		if m == nil {
			continue
		}
		if err := l.isolation(ctx, object, b); err != nil {
			return err
		}
		if m.Leader.LeaseElection() {
			l.lease(ctx, "backend.lease", generator.LeaderName(b.Name), "the store of KVCacheBackend "+b.Name,
				fmt.Sprintf("kubectl -n %s get pods -l app.kubernetes.io/instance=%s,app.kubernetes.io/component=leader; a leader Pod runs kvcache elect, whose log says why it does not lead.", l.o.SystemNamespace, b.Name))
		}
		if nodesErr != nil {
			l.r.warn("backend.members", object, sentence("Nodes could not be listed: "+nodesErr.Error()), "")
			continue
		}
		l.members(object, b, nodes.Items)
	}
	return nil
}

// isolation: a store shared by several namespaces answers only them when its NetworkPolicy is
// in force (the manager measures it: NetworkPolicyEnforced); without it, any Pod of any
// namespace can reach the store and name any tenant.
func (l *live) isolation(ctx context.Context, object string, b *kvv1.KVCacheBackend) error {
	on, err := objects.ReadOnBackend(ctx, objects.Cluster{Cached: l.c, Live: l.c}, b.Name)
	if err != nil {
		return err
	}
	spans := generator.BoundNamespaces(on.Bindings)
	if len(spans) < 2 {
		return nil
	}
	shared := fmt.Sprintf("Its Bindings span the namespaces %s", boundedList(spans, 5))
	c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced)
	switch {
	case c == nil || c.Status == metav1.ConditionUnknown:
		l.r.warn("backend.isolation", object, sentence(shared+"; whether its NetworkPolicy is enforced is not measured yet (condition "+kvv1.ConditionNetworkPolicyEnforced+")"),
			"look again once a master serves; the manager measures it then.")
	case c.Status == metav1.ConditionTrue:
		l.r.pass("backend.isolation", object, sentence(shared+"; its NetworkPolicy is enforced, so only their Pods reach it (they can still name each other's tenant)"))
	default:
		l.r.fail("backend.isolation", object, sentence(shared+", and no NetworkPolicy is in force: "+c.Message),
			"run a network plugin that enforces NetworkPolicy with spec.connection.managed.networkPolicy enabled, or give each trust domain a backend of its own.")
	}
	return nil
}

// members compares the nodes each group selects with the members the store lists, and names
// the selected nodes none of whose members registered.
func (l *live) members(object string, b *kvv1.KVCacheBackend, nodes []corev1.Node) {
	// A segment the operator could not match to a Pod has no node: then which node lacks a
	// member is not known, only how many.
	registered, unmatched := map[string]bool{}, 0
	for _, m := range b.Status.Members {
		registered[m.Node] = true
		if m.Node == "" {
			unmatched++
		}
	}
	want := 0
	var missing []string
	for _, g := range b.Spec.Connection.Managed.Members {
		sel := labels.SelectorFromSet(g.NodeSelector)
		for _, n := range nodes {
			if sel.Matches(labels.Set(n.Labels)) && !n.Spec.Unschedulable {
				want++
				if !registered[n.Name] {
					missing = append(missing, n.Name)
				}
			}
		}
	}
	got := len(b.Status.Members)
	if unmatched > 0 {
		missing = nil
	}
	cond := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionMembersMounted)
	switch {
	case want == 0:
		l.r.fail("backend.members", object, "No schedulable node matches any member group's nodeSelector, so no member runs and the store has no memory.", "fix spec.connection.managed.members[].nodeSelector, or label the nodes that should contribute.")
	case got < want || len(missing) > 0:
		sort.Strings(missing)
		msg := fmt.Sprintf("%d of the %d nodes the member groups select have a member registered with the store", got, want)
		if len(missing) > 0 {
			msg += "; none on " + boundedList(missing, 5)
		}
		msg += "."
		if cond != nil && cond.Status != metav1.ConditionTrue {
			msg += " " + sentence(cond.Message)
		}
		l.r.fail("backend.members", object, msg, fmt.Sprintf("kubectl -n %s get pods -l app.kubernetes.io/instance=%s -o wide shows which member Pods are not Running; a Running one's log says why it did not register.", l.o.SystemNamespace, b.Name))
	default:
		l.r.pass("backend.members", object, fmt.Sprintf("%d members registered, one per selected node.", got))
	}
}

// boundedList joins names, at most n of them, then counts the rest.
func boundedList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// bindings: each Binding's tenant is granted in the ledger, its domain its own, and its cache in
// use where Pods use it.
func (l *live) bindings(ctx context.Context) error {
	list := &kvv1.KVCachePoolBindingList{}
	if err := l.c.List(ctx, list, l.inNamespace()...); err != nil {
		return fmt.Errorf("list KVCachePoolBindings: %w", err)
	}
	for _, b := range list.Items {
		object := "KVCachePoolBinding/" + b.Namespace + "/" + b.Name
		l.condition("binding.ledger", object, b.Status.Conditions, kvv1.ConditionQuotaGranted, Fail, "the pool's QuotaLedgerAvailable condition and the backend's status say whether the master answered.")
		l.condition("binding.domain", object, b.Status.Conditions, kvv1.ConditionDomainExclusive, Fail, "another Binding holds the domain on this master: give this Binding's workloads another Binding.")
		if meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionCacheInUse) != nil {
			l.condition("binding.cacheInUse", object, b.Status.Conditions, kvv1.ConditionCacheInUse, Warn, "")
		}
		if meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects) != nil {
			l.condition("binding.evictions", object, b.Status.Conditions, kvv1.ConditionEvictingOwnObjects, Warn, "")
		}
		l.hits("binding.hits", object, b.Status.StoreHits)
	}
	return nil
}

// hits reports what the engines counted of the store (status.storeHits): the hit rate passes
// with its figures; engines that could not be read warn, naming why. Nothing is said while no
// engine Pod was read (CacheInUse speaks for a Binding nobody uses).
func (l *live) hits(check, object string, h *kvv1.StoreHits) {
	if h == nil {
		return
	}
	over := fmt.Sprintf("over the last %s", h.Window.Duration)
	if since := h.ObservedTime.Sub(h.Since.Time).Round(time.Second); since < h.Window.Duration {
		over = fmt.Sprintf("over the %s since its engines were first read", since)
	}
	figures := fmt.Sprintf("The store served %d of the %d prompt tokens %d engine %s asked %s (%s)",
		h.StoreTokens, h.PromptTokens, h.Pods, plural(int(h.Pods), "Pod was", "Pods were"), over, orNone(h.Ratio))
	if h.Unread > 0 {
		l.r.warn(check, object, sentence(figures+"; "+h.Message), "let the manager's namespace reach the engines' serving port (their /metrics), as a NetworkPolicy admitting Prometheus would.")
		return
	}
	l.r.pass(check, object, sentence(figures))
}

func orNone(ratio string) string {
	if ratio == "" {
		return "no prompt asked"
	}
	return ratio + " hit rate"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// condition reports one condition: True passes (Evicting is reported the other way round),
// anything else is reported at level bad with the condition's own message.
func (l *live) condition(check, object string, conds []metav1.Condition, typ string, bad Level, fix string) {
	c := meta.FindStatusCondition(conds, typ)
	good := metav1.ConditionTrue
	if typ == kvv1.ConditionEvictingOwnObjects {
		good = metav1.ConditionFalse
	}
	switch {
	case c == nil:
		l.r.add(bad, check, object, fmt.Sprintf("No %s condition yet: the operator has not reconciled it.", typ), "check that the manager runs: manager.lease above.")
	case c.Status == good:
		l.r.pass(check, object, sentence(fmt.Sprintf("%s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)))
	default:
		l.r.add(bad, check, object, sentence(fmt.Sprintf("%s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)), fix)
	}
}

// drift: every injected Pod's written keys are still what injection writes for its Binding now.
func (l *live) drift(ctx context.Context) error {
	pods := &corev1.PodList{}
	opts := append(l.inNamespace(), client.MatchingLabels{vocab.LabelInject: "true"})
	if err := l.c.List(ctx, pods, opts...); err != nil {
		return fmt.Errorf("list Pods: %w", err)
	}
	lookup := objects.Cluster{Cached: l.c, Live: l.c}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[i].Namespace+"/"+pods.Items[i].Name < pods.Items[j].Namespace+"/"+pods.Items[j].Name
	})
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[vocab.AnnotationInjected] == "" || p.DeletionTimestamp != nil {
			continue
		}
		object := "Pod/" + p.Namespace + "/" + p.Name
		if name := p.Annotations[vocab.AnnotationBinding]; name != "" {
			b, found, err := lookup.Binding(ctx, p.Namespace, name)
			if err != nil {
				return err
			}
			if !found || b.DeletionTimestamp != nil {
				// Its tenant left the master with the Binding: the Pod runs and caches nothing.
				l.r.fail("pod.binding", object, sentence(fmt.Sprintf("The KVCachePoolBinding %s it writes under was deleted: its tenant is gone from the store, so its writes fail with TENANT_NOT_REGISTERED (-1701) and it caches nothing", name)),
					"roll its workload onto another Binding (annotation "+vocab.AnnotationBinding+"), or take it out of the cache ("+vocab.LabelInject+": \"false\").")
				continue
			}
		}
		diffs, err := l.o.Injector.Drift(ctx, p, p.Namespace, lookup)
		var rf *injection.Refusal
		switch {
		case errors.As(err, &rf):
			l.r.fail("pod.drift", object, sentence("Injection would refuse this Pod now: "+rf.Message), "fix what the message names, then roll the workload.")
		case err != nil:
			return err
		case len(diffs) > 0:
			l.r.warn("pod.drift", object, sentence("Its injected configuration is not what injection writes now: "+strings.Join(diffs, "; ")), rollFix(p))
		default:
			l.r.pass("pod.drift", object, "Its injected configuration is what injection writes now.")
		}
	}
	return nil
}

// leftAlone: a Pod that carries the contract's annotations with an inject label other than
// "true" was never injected, and no webhook saw it (injection.LeftAlone).
func (l *live) leftAlone(ctx context.Context) error {
	pods := &corev1.PodList{}
	opts := append(l.inNamespace(), client.HasLabels{vocab.LabelInject})
	if err := l.c.List(ctx, pods, opts...); err != nil {
		return fmt.Errorf("list Pods: %w", err)
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[i].Namespace+"/"+pods.Items[i].Name < pods.Items[j].Namespace+"/"+pods.Items[j].Name
	})
	for i := range pods.Items {
		p := &pods.Items[i]
		if w := injection.LeftAlone(p); w != "" {
			l.r.fail("pod.optIn", "Pod/"+p.Namespace+"/"+p.Name, sentence(w), "fix the label on the workload's Pod template, then roll it; injection runs only when a Pod is created.")
		}
	}
	return nil
}

// rollFix says how to give a Pod the configuration injection writes now: recreate it through
// its workload.
func rollFix(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			if o.Kind == "ReplicaSet" {
				return fmt.Sprintf("roll its workload (kubectl -n %s rollout restart deployment <the Deployment of ReplicaSet %s>); injection runs only when a Pod is created.", p.Namespace, o.Name)
			}
			return fmt.Sprintf("roll its workload (kubectl -n %s rollout restart %s/%s); injection runs only when a Pod is created.", p.Namespace, strings.ToLower(o.Kind), o.Name)
		}
	}
	return fmt.Sprintf("recreate the Pod (kubectl -n %s delete pod %s, then apply it again); injection runs only when a Pod is created.", p.Namespace, p.Name)
}

// deployments: every ModelDeployment still passes the rules (its Binding, transport, dtype) and
// its engine is on its store's Mooncake line.
func (l *live) deployments(ctx context.Context) error {
	list := &kvv1.ModelDeploymentList{}
	if err := l.c.List(ctx, list, l.inNamespace()...); err != nil {
		return fmt.Errorf("list ModelDeployments: %w", err)
	}
	for i := range list.Items {
		md := &list.Items[i]
		object := "ModelDeployment/" + md.Namespace + "/" + md.Name
		v, err := rules.ModelDeployment(ctx, objects.Cluster{Cached: l.c}, nil, md)
		var re *objects.ReadError
		switch {
		case errors.As(err, &re):
			l.r.warn("modeldeployment.rules", object, sentence(re.Error()), "")
			continue
		case err != nil:
			return err
		}
		for _, e := range v.Errors {
			l.r.fail("modeldeployment.rules", object, sentence("Would be refused if created now: "+e.Error()), "")
		}
		for _, w := range v.Warnings {
			l.r.warn("modeldeployment.rules", object, sentence(w), "")
		}
		if len(v.Errors) == 0 && len(v.Warnings) == 0 {
			l.r.pass("modeldeployment.rules", object, "Passes every admission rule, its engine on its store's Mooncake line.")
		}
		l.hits("modeldeployment.hits", object, md.Status.StoreHits)
	}
	return nil
}

func (l *live) inNamespace() []client.ListOption {
	if l.o.Namespace == "" {
		return nil
	}
	return []client.ListOption{client.InNamespace(l.o.Namespace)}
}

func reason(err error) string {
	if s := (apierrors.APIStatus)(nil); errors.As(err, &s) {
		return string(s.Status().Reason)
	}
	return err.Error()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown (not reconciled yet)"
	}
	return s
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
