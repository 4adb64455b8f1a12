package sqlite

import (
	"reflect"
	"testing"

	sandbox "github.com/sandboxd/sandbox"
)

// fill sets every field reachable from v to a non-zero value: pointers, maps and slices get one
// element, so a field added to the domain types later is covered too.
func fill(t *testing.T, v reflect.Value, depth int) {
	if depth > 8 {
		t.Fatalf("type nests too deep at %s", v.Type())
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return // time.Time is a value; its location pointer is shared by design
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), depth+1)
			}
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, depth+1)
		fill(t, e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), depth+1)
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint8:
		v.SetUint('1')
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("fill: unhandled kind %s of %s", v.Kind(), v.Type())
	}
}

// shared reports a path at which a and b share memory.
func shared(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return path
		}
		if a.IsNil() {
			return ""
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		if a.Type().PkgPath() == "time" {
			return ""
		}
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				if p := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
					return p
				}
			}
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return path
		}
		for _, k := range a.MapKeys() {
			if p := shared(a.MapIndex(k), b.MapIndex(k), path+"["+k.String()+"]"); p != "" {
				return p
			}
		}
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := range a.Len() {
			if p := shared(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	}
	return ""
}

func TestCloneSharesNothing(t *testing.T) {
	var sb sandbox.Sandbox
	fill(t, reflect.ValueOf(&sb).Elem(), 0)
	c := clone(&sb)
	if !reflect.DeepEqual(c, &sb) {
		t.Fatalf("clone differs:\n got %+v\nwant %+v", c, &sb)
	}
	if p := shared(reflect.ValueOf(&sb).Elem(), reflect.ValueOf(c).Elem(), "Sandbox"); p != "" {
		t.Fatalf("clone shares %s with the original", p)
	}
	var empty sandbox.Sandbox
	if c := clone(&empty); !reflect.DeepEqual(c, &empty) {
		t.Fatalf("clone of a zero sandbox: %+v", c)
	}
}
