package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
)

// A program's rare settings live in a versioned configuration file (--config), the way
// Kubernetes components take theirs (KubeSchedulerConfiguration): apiVersion ConfigAPIVersion, a
// kind per program, fields absent from the file keep their defaults, an unknown field or a value
// of the wrong type is refused. The flags that set those fields before the file existed stay as
// deprecated, hidden aliases of the fields (Aliases): they and their environment variables still
// work, print a warning naming the field, and win over the file.

// ConfigAPIVersion is the apiVersion of every gpushare configuration file.
const ConfigAPIVersion = api.DefaultDomain + "/v1alpha1"

// FlagConfig is the flag naming the configuration file.
const FlagConfig = "config"

// LoadConfig reads the configuration file path (kind kind) onto cfg, a pointer to the
// configuration holding its defaults, and sets the deprecated alias flags of fs given on the
// command line or by their variables again, so that they win over the file. An empty path reads
// nothing. Every error is a usage error naming the file.
func LoadConfig(fs *pflag.FlagSet, path, kind string, cfg any) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Usagef("--%s: %w", FlagConfig, err)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return Usagef("--%s %s: %w", FlagConfig, path, err)
	}
	if tm.APIVersion != ConfigAPIVersion || tm.Kind != kind {
		return Usagef("--%s %s has apiVersion %q, kind %q: want apiVersion: %s and kind: %s", FlagConfig, path, tm.APIVersion, tm.Kind, ConfigAPIVersion, kind)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err == nil {
		js, err = durationsAsNanoseconds(js, reflect.TypeOf(cfg))
	}
	if err != nil {
		return Usagef("--%s %s: %w", FlagConfig, path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return Usagef("--%s %s: %s (docs/reference/ lists the fields of kind %s)", FlagConfig, path, strings.TrimPrefix(err.Error(), "json: "), kind)
	}
	fs.VisitAll(func(f *pflag.Flag) { // what deprecated flags and variables set wins over the file
		a, ok := f.Value.(*alias)
		if !ok || len(a.raws) == 0 {
			return
		}
		if list, ok := a.Value.(pflag.SliceValue); ok { // Set would add to the file's list
			_ = list.Replace(strings.Split(strings.Join(a.raws, ","), ","))
			return
		}
		for _, r := range a.raws {
			_ = a.Value.Set(r) // it was accepted before
		}
	})
	return nil
}

// Alias is a deprecated flag: Flag sets the configuration field Field (its JSON path, e.g.
// memory.grace).
type Alias struct{ Flag, Field string }

// Aliases defines each alias's flag on fs, hidden and deprecated with a message naming its
// field of cfg (a pointer to the configuration), which it sets. It panics on a field cfg lacks
// or of a type no flag has (a programming error).
func Aliases(fs *pflag.FlagSet, cfg any, aliases []Alias) {
	for _, a := range aliases {
		switch p := fieldByPath(reflect.ValueOf(cfg).Elem(), a.Field).Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, a.Flag, *p, "")
		case *bool:
			fs.BoolVar(p, a.Flag, *p, "")
		case *int:
			fs.IntVar(p, a.Flag, *p, "")
		case *int64:
			fs.Int64Var(p, a.Flag, *p, "")
		case *float64:
			fs.Float64Var(p, a.Flag, *p, "")
		case *time.Duration:
			fs.DurationVar(p, a.Flag, *p, "")
		case *[]string:
			fs.StringSliceVar(p, a.Flag, *p, "")
		default:
			panic(fmt.Sprintf("configuration field %s: no flag type for %T", a.Field, p))
		}
		f := fs.Lookup(a.Flag)
		f.Value, f.Hidden = &alias{Value: f.Value, field: a.Field}, true
		f.Deprecated = "set " + a.Field + " in the --config file instead"
	}
}

// AliasField is the configuration field a deprecated flag sets ("" for another flag).
func AliasField(f *pflag.Flag) string {
	if a, ok := f.Value.(*alias); ok {
		return a.field
	}
	return ""
}

func fieldByPath(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		f, ok := jsonField(v.Type(), name)
		if !ok {
			panic(fmt.Sprintf("configuration %s has no field %s", v.Type(), path))
		}
		v = v.FieldByIndex(f.Index)
	}
	return v
}

// alias is a deprecated flag's value: it keeps what it was given, to set it again after the
// configuration file (LoadConfig).
type alias struct {
	pflag.Value
	field string
	raws  []string
}

func (a *alias) Set(s string) error {
	if err := a.Value.Set(s); err != nil {
		return err
	}
	a.raws = append(a.raws, s)
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// durationsAsNanoseconds rewrites the durations of js, written as Go durations ("30s", as
// Kubernetes configurations write them), to the nanoseconds a time.Duration field of t decodes.
func durationsAsNanoseconds(js []byte, t reflect.Type) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	if err := walkDurations(doc, t, ""); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

func walkDurations(doc any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m, ok := doc.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil
	}
	for key, val := range m {
		f, ok := jsonField(t, key)
		if !ok {
			continue
		}
		if f.Type != durationType {
			if err := walkDurations(val, f.Type, path+key+"."); err != nil {
				return err
			}
			continue
		}
		s, _ := val.(string)
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s%s: %v is not a duration: write it with its unit, e.g. 30s or 5m", path, key, val)
		}
		m[key] = int64(d)
	}
	return nil
}

// jsonField is the field of struct type t that JSON names name (apiVersion and kind, in an
// embedded TypeMeta, are neither a duration nor a flag's).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}
