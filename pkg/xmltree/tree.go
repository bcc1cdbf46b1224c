// Package xmltree reads an XML document (a libvirt domain) into a tree of
// elements and lists the differences between two trees, element by
// element, whatever Go types wrote them: the differential (pkg/kvdiff)
// compares KubeVirt's domain with ours with it, and virt-launcher-hooks
// checks that a domain survives KubeVirt's domain type. A cgo-free leaf.
package xmltree

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Node is one XML element: its name, attributes, text and children, in
// document order. Domains are compared as trees of nodes, so that both
// sides are read the same way whatever Go types wrote them.
type Node struct {
	Name     string
	Attrs    map[string]string
	Text     string
	Children []*Node
}

// Parse reads an XML document into its root node.
func Parse(doc string) (*Node, error) {
	d := xml.NewDecoder(strings.NewReader(doc))
	var stack []*Node
	var root *Node
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing domain XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &Node{Name: qname(t.Name), Attrs: map[string]string{}}
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
					continue
				}
				n.Attrs[qname(a.Name)] = a.Value
			}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.Children = append(p.Children, n)
			} else {
				root = n
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].Text += strings.TrimSpace(string(t))
			}
		}
	}
	if root == nil {
		return nil, fmt.Errorf("parsing domain XML: no element")
	}
	return root, nil
}

// qname drops namespace URLs: the QEMU namespace's elements keep their
// local name under a "qemu:" prefix.
func qname(n xml.Name) string {
	if strings.Contains(n.Space, "libvirt.org/schemas/domain/qemu") {
		return "qemu:" + n.Local
	}
	return n.Local
}

// Child returns the first child named name, or nil.
func (n *Node) Child(name string) *Node {
	for _, c := range n.Children {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Find returns the nodes at a slash-separated path below n ("devices/disk").
func (n *Node) Find(path string) []*Node {
	cur := []*Node{n}
	for _, part := range strings.Split(path, "/") {
		var next []*Node
		for _, c := range cur {
			for _, cc := range c.Children {
				if cc.Name == part {
					next = append(next, cc)
				}
			}
		}
		cur = next
	}
	return cur
}

// Remove drops the children of n named name for which keep is false.
func (n *Node) Remove(name string, drop func(*Node) bool) {
	out := n.Children[:0]
	for _, c := range n.Children {
		if c.Name == name && (drop == nil || drop(c)) {
			continue
		}
		out = append(out, c)
	}
	n.Children = out
}

// Difference is one element or attribute that differs between two trees
// (KubeVirt's domain and ours in the differential), by its path ("devices/disk[1]/driver@cache").
type Difference struct {
	Path        string
	KubeVirt    string
	Ours        string
	Explanation string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: KubeVirt %s, ours %s", d.Path, show(d.KubeVirt), show(d.Ours))
}

func show(s string) string {
	if s == "" {
		return "(absent)"
	}
	return fmt.Sprintf("%q", s)
}

// Compare lists every difference between two trees: attributes and text
// by name, children by name and then by position among the siblings of
// the same name (libvirt reads the order of disks and interfaces, not the
// order of different kinds of devices).
func Compare(kv, ours *Node) []Difference {
	var out []Difference
	compare(kv, ours, kv.Name, &out)
	return out
}

func compare(a, b *Node, path string, out *[]Difference) {
	for _, k := range unionKeys(a.Attrs, b.Attrs) {
		if a.Attrs[k] != b.Attrs[k] {
			*out = append(*out, Difference{Path: path + "@" + k, KubeVirt: a.Attrs[k], Ours: b.Attrs[k]})
		}
	}
	if a.Text != b.Text {
		*out = append(*out, Difference{Path: path + "#text", KubeVirt: a.Text, Ours: b.Text})
	}
	ga, gb := group(a), group(b)
	for _, name := range unionKeys(ga, gb) {
		la, lb := ga[name], gb[name]
		for i := 0; i < len(la) || i < len(lb); i++ {
			p := path + "/" + name
			if len(la) > 1 || len(lb) > 1 {
				p += fmt.Sprintf("[%d]", i)
			}
			switch {
			case i >= len(la):
				*out = append(*out, Difference{Path: p, Ours: summary(lb[i])})
			case i >= len(lb):
				*out = append(*out, Difference{Path: p, KubeVirt: summary(la[i])})
			default:
				compare(la[i], lb[i], p, out)
			}
		}
	}
}

func group(n *Node) map[string][]*Node {
	g := map[string][]*Node{}
	for _, c := range n.Children {
		g[c.Name] = append(g[c.Name], c)
	}
	return g
}

// unionKeys is the sorted union of two maps' keys.
func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// summary is a one-line rendering of an element, for a side that lacks it.
func summary(n *Node) string {
	var b strings.Builder
	b.WriteString("<" + n.Name)
	for _, k := range unionKeys(n.Attrs, map[string]string{}) {
		fmt.Fprintf(&b, " %s=%q", k, n.Attrs[k])
	}
	if len(n.Children) == 0 && n.Text == "" {
		b.WriteString("/>")
		return b.String()
	}
	b.WriteString(">" + n.Text)
	for _, c := range n.Children {
		b.WriteString(summary(c))
	}
	b.WriteString("</" + n.Name + ">")
	return b.String()
}

// Get returns the element at path (as Difference paths name them, from
// the root's name: "domain/devices/disk[1]"), or nil.
func (n *Node) Get(path string) *Node {
	parts := strings.Split(path, "/")
	if len(parts) == 0 || parts[0] != n.Name {
		return nil
	}
	cur := n
	for _, part := range parts[1:] {
		name, index := part, 0
		if i := strings.Index(part, "["); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			if _, err := fmt.Sscanf(part[i:], "[%d]", &index); err != nil {
				return nil
			}
		}
		var same []*Node
		for _, c := range cur.Children {
			if c.Name == name {
				same = append(same, c)
			}
		}
		if index >= len(same) {
			return nil
		}
		cur = same[index]
	}
	return cur
}

// Graft copies what src has at path (a Difference's path: an element, an
// "@attribute" or "#text") into dst, when dst lacks it and holds its parent
// element; it tells whether it did.
func Graft(dst, src *Node, path string) bool {
	if elem, attr, ok := strings.Cut(path, "@"); ok {
		s, d := src.Get(elem), dst.Get(elem)
		if s == nil || d == nil || d.Attrs[attr] != "" {
			return false
		}
		d.Attrs[attr] = s.Attrs[attr]
		return true
	}
	if elem, ok := strings.CutSuffix(path, "#text"); ok {
		s, d := src.Get(elem), dst.Get(elem)
		if s == nil || d == nil || d.Text != "" {
			return false
		}
		d.Text = s.Text
		return true
	}
	s := src.Get(path)
	i := strings.LastIndex(path, "/")
	if s == nil || i < 0 || dst.Get(path) != nil {
		return false
	}
	parent := dst.Get(path[:i])
	if parent == nil {
		return false
	}
	parent.Children = append(parent.Children, s)
	return true
}

// XML writes the tree as a document: attributes sorted, the QEMU
// namespace declared on the root when a "qemu:" element uses it.
func (n *Node) XML() string {
	var b strings.Builder
	n.write(&b, true)
	return b.String()
}

func (n *Node) write(b *strings.Builder, root bool) {
	b.WriteString("<" + n.Name)
	if root && n.usesQEMU() {
		b.WriteString(` xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0"`)
	}
	for _, k := range unionKeys(n.Attrs, map[string]string{}) {
		b.WriteString(" " + k + `="`)
		_ = xml.EscapeText(b, []byte(n.Attrs[k])) // a strings.Builder does not fail
		b.WriteString(`"`)
	}
	b.WriteString(">")
	_ = xml.EscapeText(b, []byte(n.Text))
	for _, c := range n.Children {
		c.write(b, false)
	}
	b.WriteString("</" + n.Name + ">")
}

func (n *Node) usesQEMU() bool {
	if strings.HasPrefix(n.Name, "qemu:") {
		return true
	}
	for _, c := range n.Children {
		if c.usesQEMU() {
			return true
		}
	}
	return false
}
