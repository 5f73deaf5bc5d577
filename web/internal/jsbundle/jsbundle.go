// Package jsbundle joins ES modules into one by concatenation: the JavaScript
// client is written as modules of one concern each and served as one file,
// so that a page or a copy needs nothing beside it.
//
// It takes modules of a narrow form, which it checks rather than parses:
// imports of sibling modules, one per line, as import { a, b } from './x.js';
// top-level declarations at the start of a line; and, in the entry only,
// re-exports as export { a, b } from './x.js';. Every module shares one scope
// in the bundle, so a top-level name declared twice is an error, as is an
// imported name its module does not export. The modules come in the order
// of their imports, each after those it imports; the entry's exports are
// the bundle's.
package jsbundle

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

var (
	// A list of names, { a, b }: no renames, which one scope could not keep.
	nameList     = `\{\s*([\w$]+(?:\s*,\s*[\w$]+)*)\s*,?\s*\}`
	importLine   = regexp.MustCompile(`^import ` + nameList + ` from '\./([\w-]+\.js)';$`)
	reexportLine = regexp.MustCompile(`^export ` + nameList + ` from '\./([\w-]+\.js)';$`)
	declLine     = regexp.MustCompile(`^(export )?(?:const|let|var|class|function\*?|async function\*?) ([\w$]+)`)
)

// module is one source file, read and checked.
type module struct {
	name    string
	header  []string // the leading comment: what the module is for
	body    []string // the rest, imports taken out
	deps    []string // the modules it imports, in the order it names them
	imports map[string][]string
	exports map[string]bool
}

// Bundle joins entry, a module of fsys, and every module it imports (at any
// depth) into one module. Its text starts with the entry's leading comment
// and then notice, each line of which becomes a comment.
func Bundle(fsys fs.FS, entry, notice string) ([]byte, error) {
	mods := map[string]*module{}
	var order []string
	visiting := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		if visiting[name] {
			return fmt.Errorf("%s: imports itself through its imports", name)
		}
		if _, ok := mods[name]; ok {
			return nil
		}
		visiting[name] = true
		m, err := read(fsys, name, name == entry)
		if err != nil {
			return err
		}
		for _, d := range m.deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		delete(visiting, name)
		mods[name] = m
		order = append(order, name)
		return nil
	}
	if err := visit(entry); err != nil {
		return nil, err
	}

	declared := map[string]string{}
	for _, name := range order {
		m := mods[name]
		for dep, names := range m.imports {
			for _, n := range names {
				if !mods[dep].exports[n] {
					return nil, fmt.Errorf("%s: imports %s from %s, which does not export it", name, n, dep)
				}
			}
		}
		for _, line := range m.body {
			if d := declLine.FindStringSubmatch(line); d != nil {
				if other, ok := declared[d[2]]; ok {
					return nil, fmt.Errorf("%s: declares %s, as %s does: the bundle has one scope", name, d[2], other)
				}
				declared[d[2]] = name
			}
		}
	}

	var b bytes.Buffer
	put := func(lines []string) {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	put(mods[entry].header)
	b.WriteString("//\n")
	for _, l := range strings.Split(strings.TrimSpace(notice), "\n") {
		b.WriteString(strings.TrimSpace("// " + l))
		b.WriteByte('\n')
	}
	for _, name := range order {
		if name == entry {
			continue
		}
		m := mods[name]
		b.WriteString("\n// ---- " + name + " ----\n")
		put(m.header)
		b.WriteByte('\n')
		put(m.body)
	}
	b.WriteString("\n// ---- " + entry + " ----\n\n")
	put(mods[entry].body)
	return b.Bytes(), nil
}

// read reads and checks one module. Outside the entry, export goes from
// every declaration: the entry says what the bundle exports.
func read(fsys fs.FS, name string, isEntry bool) (*module, error) {
	if path.Base(name) != name {
		return nil, fmt.Errorf("%s: modules are siblings of the entry, named without a folder", name)
	}
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("read module: %w", err)
	}
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n"), "\n")
	m := &module{name: name, imports: map[string][]string{}, exports: map[string]bool{}}
	i := 0
	for ; i < len(lines) && strings.HasPrefix(lines[i], "//"); i++ {
		m.header = append(m.header, lines[i])
	}
	if len(m.header) == 0 {
		return nil, fmt.Errorf("%s: starts with no comment saying what it is for", name)
	}
	depend := func(dep, list string) []string {
		names := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
		if !slices.Contains(m.deps, dep) {
			m.deps = append(m.deps, dep)
		}
		m.imports[dep] = append(m.imports[dep], names...)
		return names
	}
	var body []string
	for n, line := range lines[i:] {
		where := fmt.Sprintf("%s:%d", name, i+n+1)
		switch {
		case importLine.MatchString(line):
			s := importLine.FindStringSubmatch(line)
			depend(s[2], s[1])
			continue
		case strings.HasPrefix(line, "import"):
			return nil, fmt.Errorf("%s: an import other than import { a, b } from './x.js';", where)
		case isEntry && reexportLine.MatchString(line):
			s := reexportLine.FindStringSubmatch(line)
			names := depend(s[2], s[1])
			for _, n := range names {
				m.exports[n] = true
			}
			body = append(body, "export { "+strings.Join(names, ", ")+" };")
			continue
		case strings.HasPrefix(line, "export"):
			d := declLine.FindStringSubmatch(line)
			if d == nil {
				return nil, fmt.Errorf("%s: an export other than of a declaration (or, in the entry, export { a, b } from './x.js';)", where)
			}
			m.exports[d[2]] = true
			if !isEntry {
				line = strings.TrimPrefix(line, "export ")
			}
		}
		body = append(body, line)
	}
	m.body = squeeze(body)
	return m, nil
}

// squeeze drops the blank lines that taking out imports leaves: those at
// the start and end, and all but one of a run.
func squeeze(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l == "" && (len(out) == 0 || out[len(out)-1] == "") {
			continue
		}
		out = append(out, l)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// clientNotice is what the client's bundle says of itself, after the
// entry's leading comment.
// Its first line is the marker tools know a generated file by, so that
// they read the modules and not the bundle.
const clientNotice = `Code generated by go generate ./web from the modules in src/. DO NOT EDIT.
Each module holds one concern; edit those, and build this file again.`

// Client builds the JavaScript client, presenced.js, from the modules in
// the folder src.
func Client(src fs.FS) ([]byte, error) {
	return Bundle(src, "presenced.js", clientNotice)
}
