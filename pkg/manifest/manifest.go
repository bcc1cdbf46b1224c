// Package manifest reads KubeVirt manifests (YAML or JSON) from files or
// standard input into kubevirt.io/api types, strictly: an unknown or
// misspelled field is an error that names it, never silently dropped.
//
// Errors come in two kinds that callers map to different exit codes:
// *UnreadableError when the input cannot be read at all, and *InvalidError
// when it was read but is not an acceptable manifest.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

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
	// Raw is the manifest as generic JSON values (maps, slices, scalars).
	Raw map[string]any
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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, &UnreadableError{Input: path, Err: err}
	}
	return data, path, nil
}

// decode converts YAML or JSON into a strictly typed object and a generic map,
// checking apiVersion and kind.
func decode(data []byte, input, wantKind string, into any) (*Document, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &InvalidError{Input: input, Msg: "empty manifest: want a " + wantKind}
	}
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("not valid YAML or JSON: %v", err)}
	}
	var raw map[string]any
	if err := json.Unmarshal(jsonData, &raw); err != nil {
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("want a %s object, got: %v", wantKind, err)}
	}
	kind, _ := raw["kind"].(string)
	if kind != wantKind {
		got := "no kind"
		if kind != "" {
			got = fmt.Sprintf("kind %q", kind)
		}
		return nil, &InvalidError{Input: input, Field: "kind", Msg: fmt.Sprintf("got %s, want %q", got, wantKind)}
	}
	apiVersion, _ := raw["apiVersion"].(string)
	if apiVersion != "kubevirt.io/v1" {
		return nil, &InvalidError{Input: input, Field: "apiVersion", Msg: fmt.Sprintf("got %q, want \"kubevirt.io/v1\"", apiVersion)}
	}
	if f := unknownField(raw, reflect.TypeOf(into), ""); f != "" {
		return nil, &InvalidError{Input: input, Field: f, Msg: "unknown field (misspelled, or not part of kubevirt.io/v1 " + wantKind + ")"}
	}
	if err := json.Unmarshal(jsonData, into); err != nil {
		return nil, &InvalidError{Input: input, Msg: describeDecodeError(err)}
	}
	return &Document{Input: input, Raw: raw}, nil
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %s: got a JSON %s, want %s", typeErr.Field, typeErr.Value, typeErr.Type)
	}
	return err.Error()
}

// VMI decodes a VirtualMachineInstance manifest.
func VMI(data []byte, input string) (*v1.VirtualMachineInstance, *Document, error) {
	vmi := &v1.VirtualMachineInstance{}
	doc, err := decode(data, input, "VirtualMachineInstance", vmi)
	if err != nil {
		return nil, nil, err
	}
	if vmi.Name == "" {
		return nil, nil, &InvalidError{Input: input, Field: "metadata.name", Msg: "must be set"}
	}
	if vmi.Namespace == "" {
		vmi.Namespace = "default"
	}
	return vmi, doc, nil
}

// VM decodes a VirtualMachine manifest.
func VM(data []byte, input string) (*v1.VirtualMachine, *Document, error) {
	vm := &v1.VirtualMachine{}
	doc, err := decode(data, input, "VirtualMachine", vm)
	if err != nil {
		return nil, nil, err
	}
	if vm.Name == "" {
		return nil, nil, &InvalidError{Input: input, Field: "metadata.name", Msg: "must be set"}
	}
	if vm.Namespace == "" {
		vm.Namespace = "default"
	}
	return vm, doc, nil
}
