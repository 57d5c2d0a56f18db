package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The soak's tenants: team-a (the walkthrough's Binding) and soak-b hold engines the whole run;
// the churn namespaces get a Binding, an engine, and lose both again, in turn.
const (
	soakBound      = "soak-b"
	soakChurn      = "soak-churn-"
	soakEngineLife = 40 * time.Second // plus up to as much again, per engine
	pauseImage     = "registry.k8s.io/pause:3.10.2"
)

func (s *soak) loadDone() <-chan struct{} { return s.loadStop }

func (s *soak) prepare(t *testing.T) {
	s.w.ensureNamespace(t, soakBound)
	for i := 0; i < 2; i++ {
		s.w.ensureNamespace(t, fmt.Sprintf("%s%d", soakChurn, i))
	}
	for _, ns := range []string{soakBound, soakChurn + "0", soakChurn + "1"} {
		waitServiceAccount(t, ns)
	}
	require.NoError(t, env.kube.Create(s.ctx, soakBinding(soakBound, soakBound)))
	eventually(t, time.Minute, 250*time.Millisecond, "the Binding "+soakBound+" granted", func() (bool, string) {
		return s.bindingGranted(soakBound, soakBound)
	})
}

func soakBinding(ns, tenant string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns},
		Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: poolName},
			Quota:   kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
			Domain:  kvv1.Domain{Name: tenant, BlockSize: 64, Dtype: "bfloat16"},
		},
	}
}

func (s *soak) bindingGranted(ns, name string) (bool, string) {
	var b kvv1.KVCachePoolBinding
	if err := env.kube.Get(s.ctx, client.ObjectKey{Namespace: ns, Name: name}, &b); err != nil {
		return false, err.Error()
	}
	return condTrue(b.Status.Conditions, kvv1.ConditionQuotaGranted), fmt.Sprintf("%+v", b.Status.Conditions)
}

// startLoad starts every load loop; each returns once the load is told to stop.
func (s *soak) startLoad() {
	for slot := 0; slot < 3; slot++ {
		s.spawnLoad(func() { s.engineSlot(slot) })
	}
	s.spawnLoad(s.unlabelledLoop)
	s.spawnLoad(s.scaleLoop)
	s.spawnLoad(s.churnLoop)
	s.spawnLoad(s.mustRefuseLoop)
}

func (s *soak) stopLoad() { close(s.loadStop) }

// pause waits d unless the load is stopping.
func (s *soak) pause(d time.Duration) bool {
	select {
	case <-s.loadDone():
		return false
	case <-s.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// standin is an opted-in stand-in engine Pod in ns, writing under the Binding named binding.
func standin(ns, name, binding, engine string) *corev1.Pod {
	var p *corev1.Pod
	if engine == "SGLang" {
		p = sglangLabelledPod(name, binding)
	} else {
		p = labelledPod(name, binding, "1")
	}
	p.Namespace = ns
	p.Labels["kvcache-soak"] = "engine"
	return p
}

// createEngine creates an opted-in Pod, recording a refusal; it returns the record of a Pod
// that was created.
func (s *soak) createEngine(what string, p *corev1.Pod) *engineRun {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	at := time.Now()
	_, err := createPod(ctx, p, false)
	if err != nil {
		s.refused(what, at, err, false)
		return nil
	}
	return &engineRun{namespace: p.Namespace, name: p.Name, engine: p.Annotations[vocab.AnnotationEngine], created: at}
}

// refused records a create the API answered with an error. A valid Pod may be refused only
// inside a fault's window, and while no manager runs only with the fail-closed message.
func (s *soak) refused(what string, at time.Time, err error, mustRefuse bool) {
	msg := err.Error()
	s.mu.Lock()
	s.refusals = append(s.refusals, refusal{at: at, what: what, message: msg})
	s.mu.Unlock()
	w := s.active(at, 2*time.Second)
	switch {
	case s.noManagerAt(at) && isAdmissionError(err) && !strings.Contains(msg, refusedByHook):
		s.breach("2 fail-closed", "%s refused while no manager ran, not with the fail-closed message: %s", what, msg)
	case w == nil && !mustRefuse:
		s.breach("1 admission", "%s refused outside any fault: %s", what, msg)
	}
}

// noManagerAt: no manager replica ran at (between the last one's end and the scale back up).
func (s *soak) noManagerAt(at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, iv := range s.noManager {
		if !at.Before(iv[0]) && !at.After(iv[1]) {
			return true
		}
	}
	return false
}

// isAdmissionError is an answer of the API server (as opposed to no answer).
func isAdmissionError(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code >= 400
}

// engineSlot keeps one stand-in running at a time, each for a while, alternating the engine
// and the namespace.
func (s *soak) engineSlot(slot int) {
	rng := rand.New(rand.NewPCG(uint64(slot), 21))
	bindings := [][2]string{{bindingNS, bindingName}, {soakBound, soakBound}}
	for i := 0; ; i++ {
		b := bindings[(slot+i)%len(bindings)]
		engine := []string{"vLLM", "SGLang"}[(slot+i)%2]
		name := fmt.Sprintf("soak-%s-%d-%d", strings.ToLower(engine), slot, i)
		run := s.createEngine("engine "+b[0]+"/"+name, standin(b[0], name, b[1], engine))
		if run == nil {
			if !s.pause(2 * time.Second) {
				return
			}
			continue
		}
		live := soakEngineLife + time.Duration(rng.Int64N(int64(soakEngineLife)))
		s.pause(live)
		s.retire(run)
		select {
		case <-s.loadDone():
			return
		default:
		}
	}
}

// retire reads an engine's rounds, deletes its Pod and keeps the record.
func (s *soak) retire(run *engineRun) {
	s.readRounds(run)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if err := deletePod(ctx, run.namespace, run.name, 2); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	run.deleted = time.Now()
	s.mu.Lock()
	s.engines = append(s.engines, run)
	s.mu.Unlock()
}

// readRounds reads every put-and-get round the engine logged, its earlier containers' too.
func (s *soak) readRounds(run *engineRun) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rounds []round
	for attempt := 0; attempt < 10; attempt++ {
		p, err := env.client.CoreV1().Pods(run.namespace).Get(ctx, run.name, metav1.GetOptions{})
		if err != nil {
			time.Sleep(2 * time.Second)
			continue
		}
		rounds = nil
		ok := true
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0 {
			prev, err := s.logRounds(ctx, run, true)
			ok = ok && err == nil
			rounds = append(rounds, prev...)
		}
		cur, err := s.logRounds(ctx, run, false)
		ok = ok && err == nil
		rounds = append(rounds, cur...)
		if ok {
			break
		}
		time.Sleep(2 * time.Second)
	}
	run.rounds = rounds
}

func (s *soak) logRounds(ctx context.Context, run *engineRun, previous bool) ([]round, error) {
	raw, err := env.client.CoreV1().Pods(run.namespace).GetLogs(run.name, &corev1.PodLogOptions{Container: "server", Timestamps: true, Previous: previous}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []round
	for _, line := range strings.Split(string(raw), "\n") {
		ts, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(rest, "{") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		var d struct {
			Stage    string  `json:"stage"`
			OK       bool    `json:"ok"`
			Put      float64 `json:"put"`
			Bytes    int     `json:"bytes"`
			GetBytes int     `json:"get_bytes"`
			GetEqual bool    `json:"get_equal"`
		}
		if json.Unmarshal([]byte(rest), &d) != nil || d.Stage != "put-get" {
			continue
		}
		out = append(out, round{at: at, ok: d.OK, put: d.Put, wrong: d.Put == 0 && d.GetBytes > 0 && !d.GetEqual})
	}
	return out, nil
}

// unlabelledLoop creates a Pod that does not opt in every 3 s in the bound namespace, checks
// that admission left it exactly as sent, and deletes it 9 s later.
func (s *soak) unlabelledLoop() {
	type live struct {
		name string
		at   time.Time
	}
	var alive []live
	defer func() {
		for _, l := range alive {
			_ = deletePod(context.Background(), bindingNS, l.name, 0)
		}
	}()
	for n := 0; s.pause(3 * time.Second); n++ {
		for len(alive) > 0 && time.Since(alive[0].at) > 9*time.Second {
			if err := deletePod(s.ctx, bindingNS, alive[0].name, 0); err != nil && s.active(time.Now(), 2*time.Second) == nil {
				s.breach("1 unlabelled", "deleting Pod %s/%s outside any fault: %v", bindingNS, alive[0].name, err)
			}
			alive = alive[1:]
		}
		p := plainPod(fmt.Sprintf("soak-plain-%d", n))
		at := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		got, err := createPod(ctx, p, false)
		cancel()
		s.mu.Lock()
		if err != nil {
			s.unlabelled.failed++
		} else {
			s.unlabelled.created++
		}
		s.mu.Unlock()
		if err != nil {
			if s.active(at, 2*time.Second) == nil {
				s.breach("1 unlabelled", "an unlabelled Pod's create failed outside any fault: %v", err)
			}
			continue
		}
		alive = append(alive, live{name: p.Name, at: at})
		if diff := changedByAdmission(p, got); diff != "" {
			s.breach("1 unlabelled", "unlabelled Pod %s/%s was changed by admission: %s", bindingNS, p.Name, diff)
		}
	}
}

// plainPod is a Pod that carries the contract's annotations but does not opt in.
func plainPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: bindingNS,
			Labels:      map[string]string{"kvcache-soak": "plain"},
			Annotations: map[string]string{vocab.AnnotationBinding: bindingName, vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(0)),
			Containers: []corev1.Container{{Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"--model", "x"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
		},
	}
}

// changedByAdmission names what differs between a Pod as sent and as stored, in what injection
// could write: labels, annotations, arguments, environment, mounts and volumes (the
// ServiceAccount admission's token volume aside).
func changedByAdmission(sent, got *corev1.Pod) string {
	var d []string
	for k, v := range got.Annotations {
		if sent.Annotations[k] != v {
			d = append(d, "annotation "+k)
		}
	}
	for k, v := range got.Labels {
		if sent.Labels[k] != v {
			d = append(d, "label "+k)
		}
	}
	if len(got.Spec.Containers) != len(sent.Spec.Containers) || len(got.Spec.InitContainers) != len(sent.Spec.InitContainers) {
		d = append(d, "containers")
	} else {
		for i, c := range got.Spec.Containers {
			o := sent.Spec.Containers[i]
			if !slices.Equal(c.Args, o.Args) || !slices.Equal(c.Command, o.Command) {
				d = append(d, "container "+c.Name+" command line")
			}
			if !slices.EqualFunc(c.Env, o.Env, func(a, b corev1.EnvVar) bool {
				return a.Name == b.Name && a.Value == b.Value && a.ValueFrom == nil && b.ValueFrom == nil
			}) || len(c.EnvFrom) != len(o.EnvFrom) {
				d = append(d, "container "+c.Name+" environment")
			}
			for _, m := range c.VolumeMounts {
				if !strings.HasPrefix(m.Name, "kube-api-access-") {
					d = append(d, "container "+c.Name+" mount "+m.Name)
				}
			}
		}
	}
	for _, v := range got.Spec.Volumes {
		if !strings.HasPrefix(v.Name, "kube-api-access-") {
			d = append(d, "volume "+v.Name)
		}
	}
	return strings.Join(d, ", ")
}

// scaleLoop scales the ModelDeployment's role between 2 and 1 replicas every 75 s.
func (s *soak) scaleLoop() {
	for n := 1; s.pause(75 * time.Second); n++ {
		replicas := 2 - n%2
		patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/roles/0/replicas","value":%d}]`, replicas)
		md := &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: bindingNS, Name: mdName}}
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		err := env.kube.Patch(ctx, md, client.RawPatch(types.JSONPatchType, []byte(patch)))
		cancel()
		if err != nil {
			if s.active(time.Now(), 2*time.Second) == nil {
				s.breach("1 load", "scaling ModelDeployment %s/%s to %d outside any fault: %v", bindingNS, mdName, replicas, err)
			}
			continue
		}
		s.mu.Lock()
		s.mdScaled++
		s.mu.Unlock()
	}
	// Back to the walkthrough's two.
	md := &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: bindingNS, Name: mdName}}
	_ = env.kube.Patch(context.Background(), md, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/roles/0/replicas","value":2}]`)))
}

// churnLoop gives a churn namespace a Binding, runs an engine under it for 30 s, then deletes
// the engine and the Binding, which must go (its tenant out of the master) within 3 minutes.
func (s *soak) churnLoop() {
	for n := 0; ; n++ {
		ns := fmt.Sprintf("%s%d", soakChurn, n%2)
		if !s.churnOnce(ns) || !s.pause(10*time.Second) {
			return
		}
	}
}

func (s *soak) churnOnce(ns string) bool {
	b := soakBinding(ns, ns)
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		err := env.kube.Create(ctx, b)
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if s.active(time.Now(), 2*time.Second) == nil {
			s.breach("1 load", "creating Binding %s/%s outside any fault: %v", ns, ns, err)
		}
		if !s.pause(2 * time.Second) {
			return false
		}
	}
	t0 := time.Now()
	for {
		if ok, _ := s.bindingGranted(ns, ns); ok {
			break
		}
		if time.Since(t0) > 3*time.Minute {
			_, msg := s.bindingGranted(ns, ns)
			s.breach("3 settle", "Binding %s/%s not granted 3 minutes after its create: %s", ns, ns, msg)
			break
		}
		if !s.pause(500 * time.Millisecond) {
			break
		}
	}
	run := s.createEngine("churn engine "+ns, standin(ns, fmt.Sprintf("soak-churn-engine-%d", time.Now().Unix()), ns, "vLLM"))
	if run != nil {
		s.pause(30 * time.Second)
		s.retire(run)
		s.waitPodGone(ns, run.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := env.kube.Delete(ctx, b)
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		s.breach("3 settle", "deleting Binding %s/%s: %v", ns, ns, err)
	}
	t1 := time.Now()
	for {
		var cur kvv1.KVCachePoolBinding
		err := env.kube.Get(context.Background(), client.ObjectKeyFromObject(b), &cur)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Since(t1) > 3*time.Minute {
			s.breach("3 settle", "Binding %s/%s still there 3 minutes after its delete (finalizers %v, conditions %+v)", ns, ns, cur.Finalizers, cur.Status.Conditions)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.mu.Lock()
	s.churned++
	s.mu.Unlock()
	s.event("binding churned", map[string]any{"namespace": ns, "deleteTook": time.Since(t1).Round(100 * time.Millisecond).String()})
	select {
	case <-s.loadDone():
		return false
	default:
		return true
	}
}

func (s *soak) waitPodGone(ns, name string) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := env.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.breach("3 settle", "Pod %s/%s still there 2 minutes after its delete", ns, name)
}

// mustRefuseLoop creates, every 10 s, a Pod admission must refuse: a wrong engine name, or a
// resubmission whose written keys are stale. Each is refused with its own message (the
// fail-closed one while no manager runs); one admitted is a breach.
func (s *soak) mustRefuseLoop() {
	stale := s.stalePod()
	for n := 0; s.pause(10 * time.Second); n++ {
		var p *corev1.Pod
		var want string
		if n%2 == 0 {
			p = labelledPod(fmt.Sprintf("soak-wrong-engine-%d", n), bindingName, "1")
			p.Annotations[vocab.AnnotationEngine] = "vllm"
			want = `annotation kvcache.gpustack.ai/engine: "vllm" is not an engine`
		} else {
			p = stale.DeepCopy()
			p.Name = fmt.Sprintf("soak-stale-%d", n)
			want = "are not what injection writes now"
		}
		at := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		_, err := createPod(ctx, p, false)
		cancel()
		if err == nil {
			s.breach("1 admission", "Pod %s/%s was admitted; it must be refused (%s)", p.Namespace, p.Name, want)
			_ = deletePod(context.Background(), p.Namespace, p.Name, 0)
			continue
		}
		s.refused("must-refuse "+p.Name, at, err, true)
		w := s.active(at, 2*time.Second)
		// Inside a fault another refusal may come first (no manager: the fail-closed one; the
		// store away: its ledger unreadable); outside, the Pod's own reason is the answer.
		if isAdmissionError(err) && !strings.Contains(err.Error(), want) && w == nil {
			s.breach("1 admission", "Pod %s refused with the wrong message (want %q): %v", p.Name, want, err)
		}
	}
}

// stalePod is an opted-in Pod as the webhook injected it (a dry-run create), with one written
// key changed: the master address of an earlier store.
func (s *soak) stalePod() *corev1.Pod {
	p, err := createPod(s.ctx, labelledPod("soak-stale", bindingName, "1"), true)
	require.NoError(s.t, err, "a dry-run create of an opted-in Pod")
	cfg := p.Annotations[vocab.AnnotationClientConfig]
	require.Contains(s.t, cfg, "mooncake-dram-leader.", "the injected client configuration names the master")
	p.Annotations[vocab.AnnotationClientConfig] = strings.Replace(cfg, "mooncake-dram-leader.", "mooncake-old-leader.", 1)
	p.ObjectMeta = metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations}
	p.Status = corev1.PodStatus{}
	// The ServiceAccount admission's token volume is its own again on the resubmission.
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "kube-api-access-") })
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(m.Name, "kube-api-access-") })
	}
	return p
}
