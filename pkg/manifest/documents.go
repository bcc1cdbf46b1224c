package manifest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Part is one document of a file that holds several (separated by
// "---" lines), for readers of more than one manifest per file (the local
// controller's VirtualMachines).
type Part struct {
	// N is the document's 1-based number in the input; empty documents
	// (a "---" line right after another) are not counted.
	N int
	// YAML is the document as written; JSON the same as JSON.
	YAML, JSON []byte
}

// Documents splits YAML or JSON into its documents, with the YAML reader
// that reads single manifests, and converts each to JSON. Documents of
// comments or blank lines only are left out. An error names the input
// and the document.
func Documents(data []byte, input string) ([]Part, error) {
	var parts []Part
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		chunk, err := r.Read()
		if err == io.EOF {
			return parts, nil
		}
		if err != nil {
			return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("document %d: not valid YAML or JSON: %v", n, err)}
		}
		js, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("document %d: not valid YAML or JSON: %v", n, err)}
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue // comments or blank lines only
		}
		parts = append(parts, Part{N: n, YAML: chunk, JSON: js})
	}
}
