package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"time"
)

// module is the import path prefix of the repository's packages, each in the folder of that name.
const module = "github.com/gpushare/gpushare/"

// fieldDocs are the doc comments of the fields of t and of the struct types it holds, by
// "package path.Type.Field", read from their packages' sources.
func fieldDocs(t reflect.Type) (map[string]string, error) {
	pkgs := map[string]bool{}
	var collect func(reflect.Type)
	collect = func(t reflect.Type) {
		if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Duration(0)) || pkgs[t.PkgPath()+"."+t.Name()] {
			return
		}
		pkgs[t.PkgPath()+"."+t.Name()] = true
		for i := 0; i < t.NumField(); i++ {
			collect(t.Field(i).Type)
		}
	}
	collect(t)
	docs := map[string]string{}
	parsed := map[string]bool{}
	for key := range pkgs {
		pkg := key[:strings.LastIndex(key, ".")]
		if parsed[pkg] || !strings.HasPrefix(pkg, module) {
			continue
		}
		parsed[pkg] = true
		dir, err := parser.ParseDir(token.NewFileSet(), strings.TrimPrefix(pkg, module), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, p := range dir {
			for _, f := range p.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					ts, ok := n.(*ast.TypeSpec)
					if !ok {
						return true
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						return false
					}
					for _, field := range st.Fields.List {
						doc := field.Doc.Text()
						if doc == "" {
							doc = field.Comment.Text()
						}
						for _, name := range field.Names {
							docs[pkg+"."+ts.Name.Name+"."+name.Name] = doc
						}
					}
					return false
				})
			}
		}
	}
	return docs, nil
}
