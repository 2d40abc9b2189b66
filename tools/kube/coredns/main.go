// Command coredns is CoreDNS's released server (github.com/coredns/coredns, pinned by go.mod) with only the plugins
// the cluster tests' Corefile names (tools/kube/coredns.yaml): the cluster DNS of tests/kube. It is what CoreDNS's
// own main package is, less the other ~55 plugins it compiles in (cloud DNS providers, tracing, etcd, ...): built by
// tools/kube/build.sh, a third of the compile on a cold cache. tests/kube/test_coredns_build.py holds the Corefile
// and this list together.
package main

import (
	"github.com/coredns/coredns/coremain"

	// The Corefile's plugins, each registering itself; dnsserver.Directives keeps CoreDNS's own order.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
