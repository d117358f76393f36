// CoreDNS with only the plugins the dev cluster's real node uses: cluster names from the API
// server (kubernetes), everything else NXDOMAIN (template). Importing core/plugin would build
// every plugin (4.5 min, 1.6 GB of modules); these few take a fraction of that.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
