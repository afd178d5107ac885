// Command kubeversion is tracer-gobin's stand-in for a Kubernetes component
// (written for these tests; no Kubernetes code): its module is named
// k8s.io/component-base so that the package below is
// k8s.io/component-base/version, and the build sets the version as
// Kubernetes release builds do:
//
//	go build -ldflags "-X k8s.io/component-base/version.gitVersion=v1.31.7-fixture" .
//
// Built with `-tags dynamic`, Get reads the version the way Kubernetes 1.28+
// does (an atomic.Value filled by the package's init); without, directly.
package main

import (
	"fmt"

	"k8s.io/component-base/version"
)

func main() {
	fmt.Printf("%+v\n", version.Get())
}
