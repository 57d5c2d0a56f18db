package injection

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
)

// ContainerRelease is the engine release a container runs, as far as admission can know it: the
// tag of its image when the image is one of the engine's published images (the tag of any other
// image says nothing about the engine inside, so the release is undeclared).
func ContainerRelease(e engines.Engine, c *corev1.Container) engines.ReleaseVerdict {
	return e.LookupRelease(e.ImageRelease(c.Image))
}

// JudgeRelease judges the release a workload runs against the support table: a release the
// table marks unsupported, or one older than every release read, is refused, naming the
// supported releases; one the table does not hold (newer than the newest read, or between two
// read) is admitted with a warning that says what to run to check it. known says where the
// release was read from, for messages ("spec.engine.version"). Pod injection and ModelDeployment
// admission both call it.
func JudgeRelease(v engines.ReleaseVerdict, known string) (warning string, rf *Refusal) {
	e := v.Engine
	rs := e.Releases()
	if len(rs) == 0 {
		return "", nil
	}
	supported := strings.Join(e.SupportedReleases(), ", ")
	switch v.Status {
	case engines.ReleaseUnsupported:
		why := fmt.Sprintf("it is older than %s, the first release this project has read, so nothing proves its Mooncake reader accepts the configuration injection writes", rs[0].Version)
		if v.Release != nil {
			why = v.Release.Unsupported
			if v.PreReleaseOf != "" {
				why = fmt.Sprintf("it is a pre-release of %s, which is not supported: %s", v.PreReleaseOf, why)
			}
		}
		return "", refuse(ReasonReleaseUnsupported, "%s %s (%s) is not supported: %s; run a release injection supports: %s %s",
			e.Name, v.Version, known, why, e.Name, supported)
	case engines.ReleaseNewer, engines.ReleaseUnread:
		where := fmt.Sprintf("newer than %s, the newest release this project has read", rs[len(rs)-1].Version)
		switch {
		case v.Status == engines.ReleaseUnread && v.PreReleaseOf != "" && slices.ContainsFunc(rs, func(r engines.Release) bool { return r.Version == v.PreReleaseOf }):
			where = fmt.Sprintf("a pre-release of %s, which this project has read, and not %s itself", v.PreReleaseOf, v.PreReleaseOf)
		case v.Status == engines.ReleaseUnread:
			where = fmt.Sprintf("not one of the releases this project has read (%s)", strings.Join(versions(rs), ", "))
		case v.PreReleaseOf != "":
			where += fmt.Sprintf(" (a pre-release of %s)", v.PreReleaseOf)
		}
		return fmt.Sprintf("%s %s (%s) is %s, so nothing here proves that its Mooncake reader accepts the injected configuration or that its parser reads the flags injection writes; check it: once its Pods run, `kvcache check` and the Binding's CacheInUse condition say whether it writes, and `python3 -c \"import <module>\"` in its image must succeed for the reader of %s (%s); hack/engines.sh adds the release to the table",
			e.Name, v.Version, known, where, e.Name, strings.Join(e.ReaderModules(), "; ")), nil
	}
	return "", nil
}

// Dtype checks that the release's --kv-cache-dtype accepts the Binding's dtype, which injection
// hands over verbatim while it owns the dtype: the release's own spellings when the table has
// them, those every supported release accepts when the release is not known. A Binding itself
// stays valid: another engine or release may accept its spelling. ModelDeployment admission calls
// it too.
func Dtype(v engines.ReleaseVerdict, b *kvv1.KVCachePoolBinding) *Refusal {
	dtype := b.Spec.Domain.Dtype
	accepted := v.Dtypes()
	if slices.Contains(accepted, dtype) {
		return nil
	}
	e := v.Engine
	var what, who string
	exit := "an argument error"
	if v.Release != nil {
		who = fmt.Sprintf("%s %s", e.Name, v.Version)
		if v.Status == engines.ReleaseNewer {
			who = fmt.Sprintf("%s %s (judged as %s, the newest release read)", e.Name, v.Version, v.Release.Version)
		}
		what = fmt.Sprintf("which %s does not accept for %s", who, engines.DtypeFlag)
		if v.Release.DtypesChecked == "config" {
			exit = "a configuration error"
		}
	} else {
		what = fmt.Sprintf("which not every release of %s that injection supports accepts for %s (the release this workload runs is not known here)", e.Name, engines.DtypeFlag)
		who = "every one of them"
	}
	also := ""
	if others := e.AcceptingReleases(dtype); len(others) > 0 {
		also = fmt.Sprintf(", or run a release of %s that accepts %q: %s", e.Name, dtype, strings.Join(others, ", "))
	}
	return refuse(ReasonDtypeUnsupported, "KVCachePoolBinding %s/%s has the dtype %q, %s, so the engine would exit at start on %s; %s accepts %s: attach through a Binding whose domain's dtype it accepts (a domain is immutable, so another dtype needs another Binding)%s",
		b.Namespace, b.Name, dtype, what, exit, who, strings.Join(accepted, ", "), also)
}

func versions(rs []engines.Release) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Version
	}
	return out
}
