// Package kvdiff is the differential between the launcher's converter
// (pkg/converter, after pkg/kvdefaults) and KubeVirt v1.6.0's own
// converter, rendered by tools/kvrender. Both domains are parsed into
// element trees (Parse), rewritten by the written list of normalizations
// and one-machine substitutions (Rules), and compared element by element
// (Compare). The test renders KubeVirt's examples, ours and the functional
// suites' manifests and checks the differences against the committed table
// testdata/differences.txt, so that every remaining difference is written
// down and none appears or disappears unnoticed.
package kvdiff
