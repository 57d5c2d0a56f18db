package storeview

import (
	"context"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kvcache-operator/kvcache/store"
)

// A cache entry has no owner but its tenant, and the Binding is the tenant's owner: when the
// Binding goes, its objects go. The master refuses to delete a tenant that owns objects, so the
// release removes them first (remove_all of that tenant), after closing the tenant's admission
// (a quota of one byte: every put is refused, so a writer still running cannot fill it again in
// between; measured). The master removes no object a reader holds a lease on right now: forcing
// it hands a read in flight another key's bytes (measured), so those stay until the lease ends,
// default_kv_lease_ttl after their last read, and the pool removes them, and the tenant, then
// (status.releasing). Nothing waits for that: the Binding is released at once.

// ReleaseBound is how long a release waits for a master it cannot read, or a deleted pool for
// its tenants' leased objects, before it lets them go (they stay on the master, with their
// ledger entry, until it restarts).
const ReleaseBound = 10 * time.Minute

// Put writes a tenant's requested quota and returns the master's snapshot of it.
func (v *View) Put(ctx context.Context, m Master, tenant string, requestedBytes int64) (store.Tenant, error) {
	t, err := m.Admin.PutTenant(ctx, tenant, requestedBytes)
	v.Metrics.LedgerWrite(m.Backend.Name, "put", err)
	v.Wrote(m)
	return t, err
}

// Released is what releasing a tenant did.
type Released struct {
	Removed      int64 // objects remove_all removed
	RemovedBytes int64 // the tenant's charged bytes that went
	Left         bool  // objects a reader leases remain: the ledger entry stays for now
	LeftBytes    int64
}

// Release closes a tenant's admission, removes its objects and deletes its ledger entry (see
// above), keeping ledger (the caller's copy of the master's) in step. A tenant not in the
// ledger is already released.
func (v *View) Release(ctx context.Context, m Master, ledger map[string]store.Tenant, tenant string) (Released, error) {
	var out Released
	t, ok := ledger[tenant]
	if !ok {
		return out, nil
	}
	// What the tenant holds as the release begins: the closing PUT's snapshot, which is newer
	// than a ledger read shared over a poll (objects written since then go too).
	charged := t.ChargedBytes
	if t.RequestedQuotaBytes != 1 {
		closed, err := v.Put(ctx, m, tenant, 1)
		if err != nil {
			return out, err
		}
		ledger[tenant], charged = closed, closed.ChargedBytes
	}
	n, err := m.Admin.RemoveTenantObjects(ctx, tenant)
	v.Wrote(m) // the figures moved
	if err != nil {
		return out, err
	}
	out.Removed = n
	err = m.Admin.DeleteTenant(ctx, tenant)
	if !store.HasCode(err, store.CodeObjectNotFound) {
		v.Metrics.LedgerWrite(m.Backend.Name, "delete", err)
	}
	v.Wrote(m)
	switch {
	case err == nil || store.HasCode(err, store.CodeObjectNotFound):
		delete(ledger, tenant)
		out.RemovedBytes = charged
		return out, nil
	case store.HasCode(err, store.CodeTenantNotEmpty):
		out.Left = true
		if l := v.Ledger(ctx, m); l.Tenants != nil {
			if x, ok := l.Tenants[tenant]; ok {
				out.LeftBytes = x.ChargedBytes
				ledger[tenant] = x
			}
		}
		out.RemovedBytes = max(0, charged-out.LeftBytes)
		return out, nil
	}
	return out, err
}

// Op is the kind of ledger write a Note records.
type Op string

// The ledger writes a Note records.
const (
	OpRegister Op = "register"
	OpRelease  Op = "release"
)

// Note is what the operator's last write of one tenant's entry did, kept for the controller
// that did not make it. It lives in memory only: after a restart of the manager the writer
// writes again, and notes again.
type Note struct {
	Op Op
	// Binding that owns the tenant, and its pool.
	Binding types.NamespacedName
	Pool    string
	// Err is the write's failure; nil for a release that left leased objects (Left).
	Err  error
	Left bool
	At   time.Time
}

// Note records what a write of tenant's entry did, replacing the note before it.
func (v *View) Note(m Master, tenant string, n Note) {
	e := v.entry(m)
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.notes == nil {
		e.notes = map[string]Note{}
	}
	e.notes[tenant] = n
}

// Clear drops tenant's note: its last write succeeded, or what it said was acted on.
func (v *View) Clear(m Master, tenant string) {
	e := v.entry(m)
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(e.notes, tenant)
}

// Notes are the master's notes by tenant (a copy).
func (v *View) Notes(m Master) map[string]Note {
	e := v.entry(m)
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(e.notes)
}
