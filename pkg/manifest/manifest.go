// Package manifest reads KubeVirt manifests (YAML or JSON) from files or
// standard input into kubevirt.io/api types, strictly: an unknown or
// misspelled field is an error that names it, never silently dropped.
//
// Errors come in two kinds that callers map to different exit codes:
// *UnreadableError when the input cannot be read at all, and *InvalidError
// when it was read but is not an acceptable manifest.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// UnreadableError means the input could not be read (missing file,
// permissions, a folder instead of a file).
type UnreadableError struct {
	Input string
	Err   error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("reading %s: %v", e.Input, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// InvalidError means the input was read but is not a valid manifest of the
// expected kind. Field names the offending field path when there is one.
type InvalidError struct {
	Input string
	Field string
	Msg   string
}

func (e *InvalidError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: field %s: %s", e.Input, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Input, e.Msg)
}

// Document is one decoded manifest: the typed object and the fields the
// author wrote, as generic JSON, so callers can check which fields were set.
type Document struct {
	// Input names where the manifest came from (a path, or "stdin").
	Input string
	// Kind is the kind the input was: VirtualMachineInstance or
	// VirtualMachine (whose template Read turned into the VMI).
	Kind string
	// Raw is the manifest as generic JSON values (maps, slices, scalars),
	// without the cluster-only fields; for a VirtualMachine read by Read,
	// it is shaped as the VMI that runs (its template's spec).
	Raw map[string]any
	// Ignored lists, sorted, the fields the input carried that only a
	// cluster sets (status, metadata.managedFields, ...,
	// kubevirt.io/* labels and annotations) and the VirtualMachine fields
	// that do not change the one VMI a launch runs (spec.runStrategy, ...).
	// The launcher says once, at info level, that it ignored them.
	Ignored []string
	// DataVolumeTemplates are a VirtualMachine's, which its dataVolume
	// volumes may name.
	DataVolumeTemplates []v1.DataVolumeTemplateSpec
}

// ReadFile reads a manifest from path, or from stdin when path is "-".
func ReadFile(path string, stdin io.Reader) ([]byte, string, error) {
	if path == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, "stdin", &UnreadableError{Input: "stdin", Err: err}
		}
		return data, "stdin", nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, path, &UnreadableError{Input: path, Err: errors.New("it is a folder; give the manifest file (YAML or JSON) itself")}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return nil, path, &UnreadableError{Input: path, Err: err}
	}
	return data, path, nil
}

// parse converts YAML or JSON holding exactly one document into a generic
// object. want describes the expected kinds for messages.
func parse(data []byte, input, want string) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &InvalidError{Input: input, Msg: "empty manifest: want a " + want}
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		chunk, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("not valid YAML or JSON: %v", err)}
		}
		js, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("not valid YAML or JSON: %v", err)}
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue // a document of comments or blank lines only
		}
		docs = append(docs, js)
	}
	switch len(docs) {
	case 0:
		return nil, &InvalidError{Input: input, Msg: "empty manifest: want a " + want}
	case 1:
	default:
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("%d YAML documents: want exactly one %s (one launch runs one VMI)", len(docs), want)}
	}
	var doc any
	if err := json.Unmarshal(docs[0], &doc); err != nil {
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("not valid YAML or JSON: %v", err)}
	}
	raw, ok := doc.(map[string]any)
	if !ok {
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("the document is %s, not an object: want a %s with apiVersion, kind, metadata and spec", jsonKind(doc), want)}
	}
	return raw, nil
}

// jsonKind names what a decoded JSON value is, for messages.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("a %T", v)
}

// checkKind checks apiVersion and that kind is one of kinds.
func checkKind(raw map[string]any, input string, kinds ...string) (string, error) {
	kind, _ := raw["kind"].(string)
	if !slices.Contains(kinds, kind) {
		got := "no kind"
		if kind != "" {
			got = fmt.Sprintf("kind %q", kind)
		}
		quoted := make([]string, len(kinds))
		for i, k := range kinds {
			quoted[i] = strconv.Quote(k)
		}
		return "", &InvalidError{Input: input, Field: "kind", Msg: fmt.Sprintf("got %s, want %s", got, strings.Join(quoted, " or "))}
	}
	apiVersion, _ := raw["apiVersion"].(string)
	if apiVersion != "kubevirt.io/v1" {
		return "", &InvalidError{Input: input, Field: "apiVersion", Msg: fmt.Sprintf("got %q, want \"kubevirt.io/v1\"", apiVersion)}
	}
	return kind, nil
}

// strict drops the cluster-only fields from raw, refuses any field the
// type of into has no place for, and decodes raw into into.
func strict(raw map[string]any, input, kind string, into any) ([]string, error) {
	ignored := stripCluster(raw, "", kind == "VirtualMachineInstance")
	if kind == "VirtualMachine" {
		if spec, ok := raw["spec"].(map[string]any); ok {
			if tmpl, ok := spec["template"].(map[string]any); ok {
				ignored = append(ignored, stripCluster(tmpl, "spec.template.", true)...)
			}
		}
	}
	if f := unknownField(raw, reflect.TypeOf(into), ""); f != "" {
		return nil, &InvalidError{Input: input, Field: f, Msg: "unknown field (misspelled, or not part of kubevirt.io/v1 " + kind + ")"}
	}
	jsonData, err := json.Marshal(raw)
	if err != nil {
		return nil, &InvalidError{Input: input, Msg: err.Error()}
	}
	if err := json.Unmarshal(jsonData, into); err != nil {
		return nil, &InvalidError{Input: input, Msg: describeDecodeError(err)}
	}
	slices.Sort(ignored)
	return ignored, nil
}

// decode converts one YAML or JSON document into a strictly typed object
// of kind wantKind and a generic map.
func decode(data []byte, input, wantKind string, into any) (*Document, error) {
	raw, err := parse(data, input, wantKind)
	if err != nil {
		return nil, err
	}
	if _, err := checkKind(raw, input, wantKind); err != nil {
		return nil, err
	}
	ignored, err := strict(raw, input, wantKind, into)
	if err != nil {
		return nil, err
	}
	return &Document{Input: input, Kind: wantKind, Raw: raw, Ignored: ignored}, nil
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %s: got a JSON %s, want %s", typeErr.Field, typeErr.Value, typeErr.Type)
	}
	return err.Error()
}

// VMI decodes a VirtualMachineInstance manifest (only that kind; Read
// also takes a VirtualMachine).
func VMI(data []byte, input string) (*v1.VirtualMachineInstance, *Document, error) {
	raw, err := parse(data, input, "VirtualMachineInstance")
	if err != nil {
		return nil, nil, err
	}
	if _, err := checkKind(raw, input, "VirtualMachineInstance"); err != nil {
		return nil, nil, err
	}
	return vmiFrom(raw, input)
}

// VM decodes a VirtualMachine manifest.
func VM(data []byte, input string) (*v1.VirtualMachine, *Document, error) {
	vm := &v1.VirtualMachine{}
	doc, err := decode(data, input, "VirtualMachine", vm)
	if err != nil {
		return nil, nil, err
	}
	if err := named(input, &vm.ObjectMeta); err != nil {
		return nil, nil, err
	}
	return vm, doc, nil
}
