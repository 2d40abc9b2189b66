//go:build tools

// Package coredns pins CoreDNS's released source for tools/kube/build.sh, which builds its main package
// (github.com/coredns/coredns) with this module's go.mod/go.sum: the cluster tests' DNS server.
package coredns

import (
	_ "github.com/coredns/coredns"
)
