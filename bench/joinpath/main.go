// Command joinpath counts what one join frame crosses on its way from the
// socket to the diff it causes: the files it enters, how often, and the hops
// between them. It reads a trace of the server's calls (delve's trace of
// transport's TestJoinPath, between its two marks) and the source, which
// says the file each function lives in. joinpath.sh runs both steps.
//
// A visit is a run of consecutive calls in one file on one goroutine; a hop
// is the step from one visit to the next, a hand-off from one goroutine to
// the next included. The tick's scan of every shard is one visit, as it
// stays in one file.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	trace := flag.String("trace", "", "delve's trace output")
	repo := flag.String("repo", "..", "the presenced checkout")
	module := flag.String("module", "github.com/presenced/presenced", "the checkout's module path")
	verbose := flag.Bool("v", false, "print each visit: goroutine, file, first function")
	gorilla := flag.String("gorilla", "", "gorilla/websocket's source directory (go list -m -f '{{.Dir}}' github.com/gorilla/websocket)")
	flag.Parse()
	files := map[string]string{} // function key -> file
	lines := map[string]int{}    // file -> lines
	if err := index(*repo, *module, files, lines); err != nil {
		log.Fatal(err)
	}
	if *gorilla != "" {
		if err := index(*gorilla, "github.com/gorilla/websocket", files, lines); err != nil {
			log.Fatal(err)
		}
	}
	calls, err := read(*trace)
	if err != nil {
		log.Fatal(err)
	}
	report(calls, files, lines, *verbose)
}

// index maps each function and method under root to its file, named
// relative to root (gorilla's with a prefix).
func index(root, module string, files map[string]string, lines map[string]int) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "bench" || n == "deploy" || n == "node_modules" || n == "examples" || strings.HasPrefix(n, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if ok, err := build.Default.MatchFile(filepath.Dir(path), d.Name()); err != nil || !ok {
			return err // a file this machine's build leaves out
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		pkg := module
		if dir := filepath.Dir(rel); dir != "." {
			pkg += "/" + filepath.ToSlash(dir)
		}
		name := rel
		if module != "github.com/presenced/presenced" {
			name = "gorilla/" + rel
		}
		lines[name] = fset.File(f.Pos()).LineCount()
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := pkg + "." + fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				key = pkg + "." + recvName(fd.Recv.List[0].Type) + "." + fd.Name.Name
			}
			files[key] = name
		}
		return nil
	})
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

type call struct {
	g   string
	key string
}

// read returns the calls between the marks, in the order they were made.
func read(path string) ([]call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []call
	on := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	entry := regexp.MustCompile(`^> goroutine\((\d+)\): (.*)$`)
	for sc.Scan() {
		m := entry.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		key := funcKey(m[2])
		switch {
		case strings.HasSuffix(key, "joinPathBegins"):
			on = true
		case strings.HasSuffix(key, "joinPathEnds"):
			return out, sc.Err()
		case on && !strings.Contains(key, "/internal/apicheck."):
			// apicheck is the test's own check of each frame against
			// the protocol's schemas, not the server's path.
			out = append(out, call{g: m[1], key: key})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no joinPathBegins ... joinPathEnds in the trace", path)
}

var closure = regexp.MustCompile(`(\.(func|deferwrap|gowrap)\d+|-fm)+$`)

// funcKey turns a traced call, "pkg.(*T[shape]).m(args)", into the key
// index gives its function: "pkg.T.m". A closure counts as its function.
func funcKey(s string) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case depth > 0:
		case c == '(' && i+1 < len(s) && s[i+1] == '*':
			i++ // a pointer receiver: keep its name
		case c == '(' && i > 0 && s[i-1] == '.':
			// a value receiver in parentheses
		case c == ')' && b.Len() > 0 && i+1 < len(s) && s[i+1] == '.':
		case c == '(':
			return closure.ReplaceAllString(b.String(), "")
		default:
			b.WriteByte(c)
		}
	}
	return closure.ReplaceAllString(b.String(), "")
}

func report(calls []call, files map[string]string, lines map[string]int, verbose bool) {
	entered := map[string]int{}
	last := map[string]string{} // goroutine -> file of its current visit
	var order []string          // goroutines in the order they first run
	hops, unknown := 0, map[string]bool{}
	prev := ""
	for _, c := range calls {
		file, ok := files[c.key]
		if !ok {
			unknown[c.key] = true
			continue
		}
		if _, seen := last[c.g]; !seen {
			order = append(order, c.g)
		}
		if last[c.g] == file {
			continue
		}
		last[c.g] = file
		entered[file]++
		if verbose {
			fmt.Printf("g%-4s %-32s %s\n", c.g, file, c.key[strings.LastIndex(c.key, "/")+1:])
		}
		if prev != "" {
			hops++
		}
		prev = file
	}
	names := make([]string, 0, len(entered))
	for f := range entered {
		names = append(names, f)
	}
	sort.Slice(names, func(i, j int) bool {
		if entered[names[i]] != entered[names[j]] {
			return entered[names[i]] > entered[names[j]]
		}
		return names[i] < names[j]
	})
	largest := ""
	for _, f := range names {
		if lines[f] > lines[largest] {
			largest = f
		}
	}
	fmt.Printf("files %d, hops %d, goroutines %d, calls %d\n", len(names), hops, len(order), len(calls))
	fmt.Printf("largest file entered: %s (%d lines)\n", largest, lines[largest])
	for _, f := range names {
		fmt.Printf("%3d  %s\n", entered[f], f)
	}
	for k := range unknown {
		fmt.Fprintf(os.Stderr, "not in the source: %s\n", k)
	}
}
