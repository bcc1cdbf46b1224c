package kvdiff

import "github.com/crashloop-harness/crashloop/pkg/xmltree"

// Node is one element of a domain (xmltree.Node).
type Node = xmltree.Node

// Difference is one element or attribute that differs between KubeVirt's
// domain (the first tree) and ours (xmltree.Difference).
type Difference = xmltree.Difference

// Parse reads a domain's XML into its root node (xmltree.Parse).
func Parse(doc string) (*Node, error) { return xmltree.Parse(doc) }

// Compare lists every difference between KubeVirt's tree and ours
// (xmltree.Compare).
func Compare(kv, ours *Node) []Difference { return xmltree.Compare(kv, ours) }
