// Package member owns what runs inside a store member Pod beside the stock
// mc_store_rest_server: the segment name its member starts under in warm failover
// (`kvcache member-run`), and the self-drain its preStop hook runs (`kvcache drain-member`).
//
// In warm failover a standby master replays the index from the operation log, and the objects
// of a member that died across the failover stay in it under the member's segment name. A new
// member mounting under that same name, its memory where the old one's was, has them read back
// as whatever that memory now holds, with a success code. [FreshName] waits for a master that
// serves, collects every name it knows for the Pod's IP (mounted, from /get_segments_detail,
// and only indexed, from the segment label of /metrics) and picks <Pod IP>:<port> in none of
// them, so those objects stay unreadable and their reads miss. Members whose Pods share an IP
// (host networking) take disjoint port ranges.
//
// A member keeps its objects in its own memory and loses all of them the moment it stops (it
// unmounts on SIGTERM, with no grace of its own), so before the kubelet signals it, [Drain] asks
// the master to move every object on the member's segments to the other members, waits until
// the master says the drain ended or the deadline passes, and reports in JSON lines what moved
// and what could not.
//
// The member's segments are found on the master by their name, <Pod IP>:<port>; where members
// share an IP (host networking), by their te_endpoint too, whose port the member process
// listens on. Whatever
// happens (no master, no segment, no room elsewhere, a deadline), Drain returns: a preStop hook
// must let the Pod stop, and objects that could not move are reported, never waited for past the
// deadline.
package member
