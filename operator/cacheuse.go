package operator

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
	"github.com/kvcache-operator/kvcache/rules"
)

// DefaultCacheInUseWindow is how long Pods that use a tenant must have been Ready with no write
// under it before CacheInUse (and a ModelDeployment's CacheAttached) turns False. An engine
// writes its first blocks with its first requests; a window shorter than the time to the first
// request would report an idle service as broken.
const DefaultCacheInUseWindow = 5 * time.Minute

// CacheInUseWindowOr is d, or DefaultCacheInUseWindow when d is zero.
func CacheInUseWindowOr(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultCacheInUseWindow
	}
	return d
}

// maxNamedPods bounds the Pods a message names; the rest are counted.
const maxNamedPods = 5

// PodUse is one Pod that uses a tenant: an injected Pod whose record names the Binding, or a
// Pod of a ModelDeployment attached through it.
type PodUse struct {
	Namespace, Name string
	// Engine runs in the Pod; the zero value when unknown.
	Engine engines.Engine
	// EngineVersion is the engine release, when known (a ModelDeployment's spec, an image tag).
	EngineVersion string
	Ready         bool
	// ReadySince is when the Pod last became Ready.
	ReadySince time.Time
	// Created is when the Pod was created: an engine may write while it warms up, before it
	// reports Ready.
	Created time.Time
	// UID is the Pod's; EngineStarted when its engine container last started (its counters
	// count from then).
	UID           types.UID
	EngineStarted time.Time
	// MetricsURL is where the engine publishes its counters (its Pod IP and serving port), or
	// MetricsErr says why that cannot be known.
	MetricsURL, MetricsErr string
}

// CacheUseInput is what the CacheInUse verdict is decided from.
type CacheUseInput struct {
	Now    time.Time
	Window time.Duration
	// Tenant is the Binding's domain; Backend the KVCacheBackend whose master holds it, and
	// StoreImage the image that master runs ("" when unknown, as for an external store).
	Tenant, Backend, StoreImage string
	Pods                        []PodUse
	// NoLedger: the store keeps no tenant ledger, so it reports nothing per tenant.
	NoLedger bool
	// Observed: the master's per-tenant figures were read by this reconcile.
	Observed bool
	// Activity is what the reads so far showed of the tenant's writes.
	Activity Activity
	// DefaultWrites: the master holds objects (or evicted some) under the tenant default, and
	// Tenant is another one.
	DefaultWrites bool
	// Prev is the condition as status has it now (nil when absent).
	Prev *metav1.Condition
	// Engines is what the Ready Pods' own counters showed over the hit-rate window; nil when
	// none was read. BlockSize is the domain's (spec.domain.blockSize), 0 when unknown.
	Engines   *enginestats.Window
	BlockSize int32
}

// minProbeTokens is how many prompt tokens the engines must have been asked in the hit-rate
// window, with none served by the store, before CacheInUse says writes are never read back:
// a few blocks' worth on every engine's block size, so an idle service is not judged.
const minProbeTokens = 4096

// ConditionVerdict is a computed condition. Keep means "leave the condition as it is": nothing new
// is known (the store was not read, or the window has not passed since the Pods started).
type ConditionVerdict struct {
	Keep    bool
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// RecheckAfter is when the verdict can change without any event (the window ends).
	RecheckAfter time.Duration
}

// CacheUse decides whether a tenant is written by the Pods that use it: True once a write
// under the tenant was seen after the first of its Pods was created; False when the
// Pods have been Ready for the window, watched all along, and none was seen; Unknown (never
// False) while no Pod uses it or none is Ready. The message moves only when the Pods do, never
// with the figures, so a store whose usage changes every poll does not rewrite status.
func CacheUse(in CacheUseInput) ConditionVerdict {
	if len(in.Pods) == 0 {
		return ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNoPods,
			Message: "no Pod uses this tenant: none carries an injection record naming the Binding, and no ModelDeployment attached through it has Pods"}
	}
	// By name, so the Pod a check names is the same one every time.
	var ready []PodUse
	for _, p := range in.Pods {
		if p.Ready {
			ready = append(ready, p)
		}
	}
	sort.Slice(ready, func(i, j int) bool {
		return ready[i].Namespace+"/"+ready[i].Name < ready[j].Namespace+"/"+ready[j].Name
	})
	if len(ready) == 0 {
		return ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNoPodReady,
			Message: fmt.Sprintf("%s %s tenant %s and none is Ready yet, so nothing can write", podList(in.Pods), plural(len(in.Pods), "uses", "use"), in.Tenant)}
	}
	if in.NoLedger {
		return ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNoTenantFigures,
			Message: fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger, so its master reports no writes per tenant: whether %s %s cannot be observed", in.Backend, podList(ready), plural(len(ready), "writes", "write"))}
	}
	// Only a verdict is kept while nothing new is known; an Unknown about the Pods (none, none
	// Ready) is recomputed from the Pods there are now.
	verdict := in.Prev != nil && (in.Prev.Reason == kvv1.ReasonWritesObserved || in.Prev.Reason == kvv1.ReasonNoWrites || in.Prev.Reason == kvv1.ReasonNoStoreHits)
	if !in.Observed {
		if verdict {
			return ConditionVerdict{Keep: true}
		}
		return ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNotObserved,
			Message: fmt.Sprintf("the master of KVCacheBackend %s has not been read yet, so writes under tenant %s are not known", in.Backend, in.Tenant)}
	}
	earliest := in.Now
	for _, p := range ready {
		if !p.ReadySince.IsZero() && p.ReadySince.Before(earliest) {
			earliest = p.ReadySince
		}
	}
	// A write counts from the first of the Pods' creation: an engine may write while it warms
	// up, before its readiness probe passes (and the read that sees it may fall in between).
	started := earliest
	for _, p := range in.Pods {
		c := p.Created
		if c.IsZero() {
			c = p.ReadySince
		}
		if !c.IsZero() && c.Before(started) {
			started = c
		}
	}
	// A True condition is itself evidence of a write at its transition: it survives a restart
	// of the manager, whose first read is only a baseline.
	written := in.Activity.LastWrite
	if p := in.Prev; p != nil && p.Status == metav1.ConditionTrue && p.LastTransitionTime.After(written) {
		written = p.LastTransitionTime.Time
	}
	if !written.IsZero() && !written.Before(started.Truncate(time.Second)) {
		if v, ok := neverRead(in, ready, earliest); ok {
			return v
		}
		return ConditionVerdict{Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesObserved,
			Message: fmt.Sprintf("the master of KVCacheBackend %s saw writes under tenant %s while Pods using it run", in.Backend, in.Tenant)}
	}
	watchedFrom := earliest
	if in.Activity.Since.After(watchedFrom) {
		watchedFrom = in.Activity.Since
	}
	if left := watchedFrom.Add(in.Window).Sub(in.Now); left > 0 {
		if verdict {
			return ConditionVerdict{Keep: true, RecheckAfter: left}
		}
		return ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonAwaitingWrites, RecheckAfter: left,
			Message: fmt.Sprintf("no write under tenant %s seen yet; %s %s been Ready and watched since %s: without a write within %s of that this turns False",
				in.Tenant, podList(ready), plural(len(ready), "has", "have"), watchedFrom.UTC().Format(time.RFC3339), in.Window)}
	}
	return ConditionVerdict{Status: metav1.ConditionFalse, Reason: kvv1.ReasonNoWrites, Message: noWritesMessage(in, ready)}
}

// neverRead is the verdict on a tenant that is written and never read back, from the engines'
// own counters: two or more engines (the store serves one engine what another computed; one
// engine's repeats come from its own prefix cache) asked for at least minProbeTokens over a
// whole hit-rate window, watched all along, and the store served none of them. The message
// names the likely cause, from what the counters and the domain show, and no figure (figures
// move with every request; status.storeHits carries them).
func neverRead(in CacheUseInput, ready []PodUse, readySince time.Time) (ConditionVerdict, bool) {
	w := in.Engines
	if w == nil || w.Pods < 2 || w.StoreTokens > 0 || w.PromptTokens < minProbeTokens {
		return ConditionVerdict{}, false
	}
	if w.From.After(in.Now.Add(-w.Window)) || readySince.After(in.Now.Add(-w.Window)) {
		return ConditionVerdict{}, false // not watched for a whole window yet
	}
	var cause string
	switch {
	case len(w.Models) > 1:
		cause = fmt.Sprintf("the Pods serve different models (%s), whose blocks never match one another's prompts: give each model its own KVCachePoolBinding (its own domain)", strings.Join(w.Models, ", "))
	case in.BlockSize > 0 && w.Requests > 0 && w.PromptTokens/w.Requests < float64(in.BlockSize):
		cause = fmt.Sprintf("the prompts are shorter than a block (spec.domain.blockSize %d tokens): only whole blocks are stored and looked up, so a prompt shorter than one is never served from the store", in.BlockSize)
	default:
		cause = "no prompt shared a prefix of a block or more with one another engine had computed: the store serves only prefixes computed before (prompts that never repeat, or a prefix that differs on every request, such as a timestamp or a request id before the shared text)"
	}
	return ConditionVerdict{Status: metav1.ConditionFalse, Reason: kvv1.ReasonNoStoreHits,
		Message: fmt.Sprintf("the engines write under tenant %s, yet for the last %s the store served none of the prompt tokens %s %s asked (their own counters): likely %s",
			in.Tenant, w.Window, podList(ready), plural(len(ready), "was", "were"), cause)}, true
}

// noWritesMessage names the Pods and the checks that fit their engines.
func noWritesMessage(in CacheUseInput, ready []PodUse) string {
	var checks []string
	seen := map[string]bool{}
	for _, p := range ready {
		id := p.Engine.ID
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		module, others := readerModule(p)
		switch id {
		case engines.VLLM.ID:
			checks = append(checks, fmt.Sprintf(`that the image has the reader of the injected file: kubectl -n %s exec %s -- python3 -c "import %s"%s (an ImportError means nothing reads it: the engine runs with no cache at all)`, p.Namespace, p.Name, module, others))
		case engines.VLLMAscend.ID:
			checks = append(checks, "vLLM-Ascend's Mooncake backend never passes the tenant to the store: its writes go to the tenant default, which needs a KVCachePoolBinding whose domain is default")
		case engines.SGLang.ID:
			checks = append(checks, fmt.Sprintf(`that the image has SGLang's Mooncake store: kubectl -n %s exec %s -- python3 -c "import %s"%s`, p.Namespace, p.Name, module, others))
		}
	}
	if in.Tenant != kvv1.DefaultDomainName {
		if in.DefaultWrites {
			checks = append(checks, fmt.Sprintf("the master holds writes under the tenant default instead: an engine that ignores the injected tenant (%s) writes there", in.Tenant))
		} else {
			checks = append(checks, "whether the engine ignores the injected tenant: it then writes under the tenant default, which this master refuses (TENANT_NOT_REGISTERED) unless a Binding registers the domain default")
		}
	}
	checks = append(checks, versionChecks(in, ready)...)
	return fmt.Sprintf("no write under tenant %s reached the master of KVCacheBackend %s while %s %s been Ready for %s or longer: the configuration is in place, yet the engine caches nothing. Check %s",
		in.Tenant, in.Backend, podList(ready), plural(len(ready), "has", "have"), in.Window, strings.Join(checks, "; "))
}

// readerModule is the module of the Mooncake reader on the Pod's engine release, from the
// support table, and, when the table does not hold the release, where the reader lives on the
// releases it does (the newest supported release's module is the one to import).
func readerModule(p PodUse) (module, others string) {
	if v := p.Engine.LookupRelease(p.EngineVersion); v.Release != nil && v.Status != engines.ReleaseNewer {
		return v.Release.ReaderModule(), ""
	}
	modules := p.Engine.ReaderModules()
	if len(modules) == 0 {
		return "", ""
	}
	module, _, _ = strings.Cut(modules[0], " (")
	if len(modules) > 1 {
		others = fmt.Sprintf(" (the reader's module by release: %s)", strings.Join(modules, "; "))
	}
	return module, others
}

// versionChecks says when an engine release bundles a Mooncake client on another line than the
// master, and otherwise what to compare.
func versionChecks(in CacheUseInput, ready []PodUse) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range ready {
		k := p.Engine.ID + "@" + p.EngineVersion
		if p.Engine.ID == "" || p.EngineVersion == "" || seen[k] {
			continue
		}
		seen[k] = true
		if w := rules.VersionSkew(p.Engine, p.EngineVersion, in.Backend, in.StoreImage); w != "" {
			out = append(out, w)
		}
	}
	if len(out) > 0 {
		return out
	}
	line, ok := engines.MooncakeLine(engines.ImageTag(in.StoreImage))
	if !ok {
		return []string{"that the engine's bundled Mooncake client is on the master's Mooncake line: a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900)"}
	}
	return []string{fmt.Sprintf("that the engine's bundled Mooncake client is on the master's line (Mooncake %s, image %s): a client on another line starts healthy and then fails every write with RPC_FAIL (-900)", line, in.StoreImage)}
}

// podList names Pods, a bounded number of them, then counts the rest: "Pods a, b and 3 more".
func podList(pods []PodUse) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	sort.Strings(names)
	noun := "Pod"
	if len(names) > 1 {
		noun = "Pods"
	}
	if len(names) > maxNamedPods {
		return fmt.Sprintf("%d %s (%s and %d more)", len(names), noun, strings.Join(names[:maxNamedPods], ", "), len(names)-maxNamedPods)
	}
	return fmt.Sprintf("%s %s", noun, strings.Join(names, ", "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// EvictionInput is what EvictingOwnObjects is decided from.
type EvictionInput struct {
	Now time.Time
	// Hold is how long after the last eviction seen the condition stays True: evictions come
	// in bursts with the writes that cause them, and a condition that followed each poll would
	// flap.
	Hold     time.Duration
	Tenant   string
	Grant    *resource.Quantity
	NoLedger bool
	Observed bool
	Activity Activity
	// Prev is the condition as status has it now (nil when absent).
	Prev *metav1.Condition
}

// Eviction decides EvictingOwnObjects: True while the domain is at its grant, seen within the
// hold as evictions of its own objects (reason AtGrant) or, worse, as writes the store refused
// for the quota (reason WritesRefused: at the grant the master evicts only objects nobody read
// within default_kv_lease_ttl, so a domain whose objects are all being read has its new writes
// refused with TENANT_QUOTA_EXCEEDED, -1700; so is a value larger than the grant). False
// otherwise. ok is false when the condition should not be set: the store keeps no ledger
// (nothing per tenant), or it was not read (keep what status says).
func Eviction(in EvictionInput) (v ConditionVerdict, ok bool) {
	if in.NoLedger || !in.Observed {
		return ConditionVerdict{Keep: !in.NoLedger}, false
	}
	within := func(t time.Time) bool { return !t.IsZero() && in.Now.Sub(t) < in.Hold }
	a := in.Activity
	if a.LastEviction.IsZero() && a.LastRejection.IsZero() && in.Prev != nil && in.Prev.Status == metav1.ConditionTrue && in.Now.Sub(a.Since) < in.Hold {
		// Watched for less than the hold (a restarted manager): evictions may go on unseen.
		return ConditionVerdict{Keep: true}, false
	}
	grant := "its grant"
	if in.Grant != nil {
		grant = "its grant of " + in.Grant.String()
	}
	const advice = "a ceiling is not a reservation. Raise spec.quota.ceiling (up to the pool's total), or the capacity behind the pool (grants are cut in proportion while ceilings oversubscribe the store), or accept it"
	switch {
	case within(a.LastRejection):
		last := a.LastRejection
		if a.LastEviction.After(last) {
			last = a.LastEviction
		}
		return ConditionVerdict{Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesRefused, RecheckAfter: in.Hold - in.Now.Sub(last),
			Message: fmt.Sprintf("tenant %s is at %s and the store refuses some of its writes (TENANT_QUOTA_EXCEEDED, -1700): at the grant it evicts only the domain's objects nobody read within the master's default_kv_lease_ttl, and a value larger than the grant never fits; %s",
				in.Tenant, grant, advice)}, true
	case within(a.LastEviction):
		return ConditionVerdict{Status: metav1.ConditionTrue, Reason: kvv1.ReasonAtGrant, RecheckAfter: in.Hold - in.Now.Sub(a.LastEviction),
			Message: fmt.Sprintf("tenant %s is at %s, so the store evicts the domain's own older objects to admit its new writes (status.evicted counts the bytes): going over the grant does not fail a write, and %s",
				in.Tenant, grant, advice)}, true
	}
	return ConditionVerdict{Status: metav1.ConditionFalse, Reason: kvv1.ReasonNotEvicting,
		Message: fmt.Sprintf("the store evicted none of tenant %s's objects and refused none of its writes within the last %s: its writes fit its grant", in.Tenant, in.Hold)}, true
}
