// Package mooncaketest starts the real Mooncake store processes from the PyPI venv that
// hack/mooncake.sh provides, for tests: [Bin] finds the venv's executables (a missing venv
// FAILS the test, it never skips), [FreePorts] picks loopback ports for them, [Start] runs a
// long-lived process such as mooncake_master or mc_store_rest_server in its own process group
// and stops it when the test ends, [Run] runs a short-lived one to completion, and [Poll] waits
// for a condition while watching the processes it depends on. [StartMaster] and [StartMember]
// start a master and members the way the store's templates configure them (members on distinct
// loopback addresses stand in for Pods with their own IPs), and [StartClient] the store's own
// Python client, whose values are derived from their keys ([Payload]) and judged byte for byte.
//
// The wheel is Linux-only, and so are the process groups and parent-death signals the helpers
// rely on: everything but this comment is built on Linux only.
package mooncaketest
