// Command coredns is the cluster DNS of hack/cluster.sh: CoreDNS with only the plugins that
// cluster's Corefile uses. Leaving out forward (and every other resolver plugin) means no query
// can leave the machine: names outside cluster.local get an error, never an upstream answer.
//
// CoreDNS registers a plugin when its package is imported; the server orders plugins by its own
// directive list, so importing is all it takes.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
