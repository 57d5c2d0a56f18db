package scale_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// auditPolicy records every request of the given users at Metadata level and nothing else.
func auditPolicy(users ...string) string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["` + strings.Join(users, `", "`) + `"]
  - level: None
`
}

// auditEvent is one audited request, with ObjectRef and ResponseStatus never nil (requests
// to non-resource URLs have no object).
type auditEvent struct{ auditv1.Event }

// resource is "group/resource[/subresource]" ("/pods" for the core group).
func (e auditEvent) resource() string {
	r := e.ObjectRef.APIGroup + "/" + e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		r += "/" + e.ObjectRef.Subresource
	}
	return r
}

func (e auditEvent) object() string {
	if e.ObjectRef.Namespace == "" {
		return e.ObjectRef.Name
	}
	return e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
}

func (e auditEvent) isWrite() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// readAudit reads the audit log: one event per request of user (the last stage seen of each;
// a watch still open has only ResponseStarted).
func readAudit(path, user string) ([]auditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byID := map[types.UID]int{}
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		if e.User.Username != user {
			continue
		}
		if e.ObjectRef == nil {
			e.ObjectRef = &auditv1.ObjectReference{}
		}
		if e.ResponseStatus == nil {
			e.ResponseStatus = &metav1.Status{}
		}
		if i, ok := byID[e.AuditID]; ok {
			out[i] = e
			continue
		}
		byID[e.AuditID] = len(out)
		out = append(out, e)
	}
	return out, sc.Err()
}

// between keeps the events received in [from, to).
func between(events []auditEvent, from, to time.Time) []auditEvent {
	var out []auditEvent
	for _, e := range events {
		if at := e.RequestReceivedTimestamp.Time; !at.Before(from) && at.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// countBy counts events by a key and returns "count key" lines, most frequent first.
func countBy(events []auditEvent, key func(auditEvent) string) []string {
	n := map[string]int{}
	for _, e := range events {
		n[key(e)]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if n[keys[i]] != n[keys[j]] {
			return n[keys[i]] > n[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%6d  %s", n[k], k)
	}
	return out
}

// podListWatches are the user's LIST and WATCH requests on Pods, with their scope, and how many
// of them select no label (every Pod of their scope).
func podListWatches(events []auditEvent) (n int, unselected int, scopes []string) {
	var ps []auditEvent
	for _, e := range events {
		if e.ObjectRef.APIGroup == "" && e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "" && (e.Verb == "list" || e.Verb == "watch") {
			ps = append(ps, e)
			if u, err := url.Parse(e.RequestURI); err != nil || u.Query().Get("labelSelector") == "" {
				unselected++
			}
		}
	}
	return len(ps), unselected, countBy(ps, func(e auditEvent) string {
		ns := e.ObjectRef.Namespace
		if ns == "" {
			ns = "(all namespaces)"
		}
		sel := ""
		if u, err := url.Parse(e.RequestURI); err == nil {
			sel = u.Query().Get("labelSelector")
		}
		return fmt.Sprintf("%s namespace=%s labelSelector=%q", e.Verb, ns, sel)
	})
}
