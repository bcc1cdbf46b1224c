package manifest

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// unknownField walks a decoded manifest alongside the Go type it decodes
// into and returns the path of the first key the type has no field for.
// encoding/json's DisallowUnknownFields cannot do this for KubeVirt types:
// VirtualMachineInstanceSpec has its own UnmarshalJSON, below which
// unknown fields are silently dropped.
func unknownField(raw any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := raw.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				ft, ok := fields[k]
				if !ok {
					return join(path, k)
				}
				if f := unknownField(v[k], ft, join(path, k)); f != "" {
					return f
				}
			}
		case reflect.Map:
			for k, e := range v {
				if f := unknownField(e, t.Elem(), join(path, k)); f != "" {
					return f
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range v {
				if f := unknownField(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); f != "" {
					return f
				}
			}
		}
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields maps the JSON names of a struct's fields (including those of
// inlined embedded structs) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
