// Package leader owns running a stock mooncake_master only while this process holds the
// backend's Lease (coordination.k8s.io/v1, `<backend>-leader`). It is what `kvcache elect`
// runs in each leader Pod: no published Mooncake build has a Kubernetes HA backend, so the
// election happens here, with client-go's leaderelection, and the master runs in its plain,
// non-HA mode as a child process.
//
// While standby no master runs, so the master's readiness probe fails and the leader
// Service routes only to the serving master. On becoming leader the master starts in its own
// process group. A graceful stop (the context ends) stops the master first and releases the
// Lease second, so a standby can take over at once; a lost Lease kills the master at once and
// touches the Lease no more; a master that exits by itself releases the Lease. The Pod that
// leads carries the label [vocab.LabelStoreLeader]="true"; a standby writes "false" on its own Pod
// at start, and a new leader on its predecessor's (which may have died with its node).
//
// A Lease alone would make every API server outage longer than RenewDeadline stop the serving
// master (and empty the cache), since a leader that cannot renew cannot tell a restarting API
// server from a partition that lets a standby take over. With a peer port the launchers of a
// backend settle that between themselves (peer.go, hold.go): a standby that reaches the API
// server renews the Lease for the leader, and when none does, every standby the leader's term
// acknowledged promises not to take over, for at most MaxHold.
//
// Process groups are a Unix facility; on other systems [Run] refuses to start the master.
package leader
