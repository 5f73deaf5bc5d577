package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// printUsage writes -h: what the command does, then each flag of table with
// the form of its value, its text, its variable and its default.
func printUsage(out io.Writer, fs *flag.FlagSet, table []setting) {
	fmt.Fprintf(out, "Usage: presenced [flags]\n\n"+
		"Serves presence over WebSocket and HTTP, with the demo page at / and metrics at /metrics.\n"+
		"Every flag can also be set by the environment variable named after it, %s<FLAG> in upper\n"+
		"case with - as _ (PRESENCED_ADDR, PRESENCED_MEMBER_LIST, ...); a flag on the command line\n"+
		"wins over its variable. Pass secrets in the environment: arguments show in ps.\n\nFlags:\n", envPrefix)
	sorted := slices.Clone(table)
	slices.SortFunc(sorted, func(a, b setting) int { return strings.Compare(a.name, b.name) })
	for _, s := range sorted {
		fmt.Fprintf(out, "  -%s", s.name)
		if arg := placeholder(s); arg != "" {
			fmt.Fprintf(out, " %s", arg)
		}
		fmt.Fprintf(out, "\n    \t%s", s.usage)
		if !s.flagOnly {
			fmt.Fprintf(out, " ($%s)", envName(s.name))
		}
		if s.reset != nil {
			// The value before parsing: -tick 2s -h still shows 1s.
			fmt.Fprintf(out, " (default %s)", fs.Lookup(s.name).DefValue)
		}
		fmt.Fprintln(out)
	}
}

// placeholder names the kind of value s takes, for -h; "" for a switch.
func placeholder(s setting) string {
	if s.arg != "" {
		return s.arg
	}
	switch s.value.(type) {
	case *boolValue:
		return ""
	case *listValue:
		return "list"
	case numberValue[time.Duration]:
		return "duration"
	case numberValue[float64]:
		return "number"
	case numberValue[int], numberValue[int64]:
		return "n"
	default:
		return "value" // a new type: TestHelpNamesTheVariables asks for a placeholder
	}
}

// strayVariables returns a warning for each PRESENCED_ variable of environ
// (as os.Environ lists it) that sets no flag, naming the flag closest to
// it: a typo such as PRESENCED_TIK would otherwise be ignored unseen. A
// variable getenv does not see is not the server's: run's caller (a test)
// gave it an environment of its own.
func strayVariables(environ []string, getenv func(string) string) []string {
	var table options
	var names []string
	known := map[string]bool{}
	for _, s := range table.settings() {
		names = append(names, s.name)
		known[envName(s.name)] = !s.flagOnly
	}
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || getenv(name) == "" {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))
		near := closest(flag, names)
		if near == flag {
			warnings = append(warnings, fmt.Sprintf("$%s is ignored: -%s is a command-line flag only", name, flag))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("$%s names no flag and is ignored; the closest is -%s ($%s)", name, near, envName(near)))
	}
	return warnings
}

// closest returns the name of names nearest to s by edit distance, the
// first of those as near.
func closest(s string, names []string) string {
	best, bestDist := "", -1
	for _, n := range names {
		if d := editDistance(s, n); bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, over bytes:
// flag names are ASCII.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
