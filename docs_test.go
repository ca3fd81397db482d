package tenure_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Go snippets in the README, in docs/*.md and in the package docs are type-checked
// against the module, so an example that does not build fails here. A
// snippet is a fragment of a function body: it may use the names below
// without declaring them (the reader's own program would), and "{ … }" or
// "{ ... }" stands for code the reader writes. Unused variables are allowed;
// everything else must compile.

// assumed are the names a snippet may use without declaring them.
var assumed = map[string]string{
	"ctx":          "ctx context.Context",
	"st":           "st *store.Store",
	"data":         "data []byte",
	"newData":      "newData []byte",
	"shardIDs":     "shardIDs []string",
	"serverTLS":    "serverTLS *tls.Config",
	"clientTLS":    "clientTLS *tls.Config",
	"cmd":          "cmd []byte",
	"query":        "query []byte",
	"req":          "req []byte",
	"runScheduler": "runScheduler func(context.Context, uint64)",
	"process":      "process func(context.Context, string, uint64)",
	"host":         "host *rsm.Host",
	"addr":         "addr string",
	"opts":         "opts rsm.Options",
	"t":            "t *testing.T",
	"c":            "c *rsmtest.Cluster",
	"i":            "i int",
	"s":            "s *store.Store",
	"fs":           "fs *faultstore.Store",
	"elapsed":      "elapsed time.Duration",
	"seed":         "seed uint64",
	"a":            "a int",
	"b":            "b int",
}

// packages a snippet may name, by the name it uses.
var snippetImports = map[string]string{
	"context":    "context",
	"tls":        "crypto/tls",
	"time":       "time",
	"slog":       "log/slog",
	"store":      "github.com/tenure-io/tenure/store",
	"election":   "github.com/tenure-io/tenure/election",
	"lease":      "github.com/tenure-io/tenure/lease",
	"rsm":        "github.com/tenure-io/tenure/rsm",
	"kv":         "github.com/tenure-io/tenure/rsm/kv",
	"rsmtest":    "github.com/tenure-io/tenure/rsm/rsmtest",
	"faultstore": "github.com/tenure-io/tenure/store/faultstore",
	"memstore":   "github.com/tenure-io/tenure/store/memstore",
	"http":       "net/http",
	"testing":    "testing",
	"driver":     "github.com/tenure-io/tenure/store/driver",
	"awsutil":    "github.com/tenure-io/tenure/internal/awsutil",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
}

type snippet struct {
	where string // file:line
	code  string
}

// readmeSnippets returns the ```go blocks of a Markdown file (the README or
// a page of docs/).
func readmeSnippets(t *testing.T, path string) []snippet {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &snippet{where: fmt.Sprintf("%s:%d", path, n+1)}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return out
}

// docSnippets returns the code blocks (lines indented by a tab after "//")
// of a package's doc.go that parse as Go statements.
func docSnippets(t *testing.T, path string) []snippet {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	var cur *snippet
	// A block that is not a run of statements as a whole (an import line
	// above a snippet, say) is tried paragraph by paragraph.
	flush := func() {
		if cur == nil {
			return
		}
		if _, err := parseBody(cur.code); err == nil {
			out = append(out, *cur)
		} else {
			for _, para := range strings.Split(cur.code, "\n\n") {
				if _, err := parseBody(para); err == nil && strings.TrimSpace(para) != "" {
					out = append(out, snippet{where: cur.where, code: para})
				}
			}
		}
		cur = nil
	}
	for i, line := range strings.Split(string(b), "\n") {
		code, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if strings.TrimSpace(line) == "//" && cur != nil {
				cur.code += "\n"
				continue
			}
			flush()
			continue
		}
		if cur == nil {
			cur = &snippet{where: fmt.Sprintf("%s:%d", path, i+1)}
		}
		cur.code += code + "\n"
	}
	flush()
	return out
}

var (
	ellipsisBlock = regexp.MustCompile(`\{\s*(…|\.\.\.)\s*\}`)
	importLine    = regexp.MustCompile(`(?m)^import (_ )?"[^"]+".*$`)
)

// splitImports takes a snippet's import lines out of its body: they show
// the reader what to import, and they are checked as imports.
func splitImports(code string) (imports []string, body string) {
	for _, m := range importLine.FindAllString(code, -1) {
		imports = append(imports, strings.TrimPrefix(strings.SplitN(m, "//", 2)[0], "import "))
	}
	return imports, ellipsisBlock.ReplaceAllString(importLine.ReplaceAllString(code, ""), "{}")
}

func parseBody(code string) (*ast.File, error) {
	_, body := splitImports(code)
	return parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+body+"\n}\n", 0)
}

// source wraps a snippet into a file: imports for the packages it names, the
// assumed names it uses as parameters, and the snippet in a block of its own
// so that it may redeclare them.
func source(t *testing.T, s snippet) string {
	f, err := parseBody(s.code)
	if err != nil {
		t.Fatalf("%s: the snippet does not parse as Go statements: %v", s.where, err)
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			used[id.Name] = true
		}
		return true
	})
	var imports, params []string
	for name, path := range snippetImports {
		if used[name] {
			imports = append(imports, fmt.Sprintf("%s %q", name, path))
		}
	}
	for name, decl := range assumed {
		if used[name] {
			params = append(params, decl)
			// The parameter's type may need a package the snippet does not name.
			for pkg, path := range snippetImports {
				if strings.Contains(decl, pkg+".") && !used[pkg] {
					imports = append(imports, fmt.Sprintf("%s %q", pkg, path))
					used[pkg] = true
				}
			}
		}
	}
	own, body := splitImports(s.code)
	imports = append(imports, own...)
	slices.Sort(imports)
	slices.Sort(params)
	return fmt.Sprintf("package p\n\nimport (\n%s\n)\n\nfunc _(%s) {\n{\n%s\n}\n}\n",
		strings.Join(imports, "\n"), strings.Join(params, ", "), body)
}

// exportData maps import paths to their compiled export data, built by the
// go tool for every package a snippet may import: the module's and those
// in snippetImports.
func exportData(t *testing.T) map[string]string {
	paths := []string{"./..."} // every package of the module, for import lines
	for _, p := range snippetImports {
		paths = append(paths, p)
	}
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, paths...)...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	m := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		m[p.ImportPath] = p.Export
	}
	return m
}

func TestDocSnippetsCompile(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var snippets []snippet
	for _, p := range append([]string{"README.md"}, pages...) {
		snippets = append(snippets, readmeSnippets(t, p)...)
	}
	docs, err := filepath.Glob("*/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("*/*/doc.go")
	for _, d := range append(docs, more...) {
		snippets = append(snippets, docSnippets(t, d)...)
	}
	if len(snippets) < 5 {
		t.Fatalf("found %d snippets; the README and docs/ alone have more: is the extraction broken?", len(snippets))
	}
	exports := exportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
	for _, s := range snippets {
		src := source(t, s)
		f, err := parser.ParseFile(fset, s.where, src, 0)
		if err != nil {
			t.Errorf("%s: %v\n%s", s.where, err, src)
			continue
		}
		var problems []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft &&
				(strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
				return // fragments leave results, and the types of assumed names, unused
			}
			problems = append(problems, err.Error())
		}}
		_, _ = conf.Check("p", fset, []*ast.File{f}, nil)
		if len(problems) > 0 {
			t.Errorf("%s: the snippet does not compile:\n  %s\n--- as checked:\n%s", s.where, strings.Join(problems, "\n  "), src)
		}
	}
}
