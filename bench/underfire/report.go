package main

import (
	"cmp"
	"fmt"
)

// row is what a scenario measured for one line of the final table, on one
// binary.
type row struct{ name, figure, how string }

// outcome is what a scenario gave on one binary: its rows, or why it could
// not run.
type outcome struct {
	rows   []row
	failed string
}

// line is one line of the final table: a case measured on both binaries.
type line struct{ name, before, after, how string }

// compare lines up the rows of scenario name on the before binary (measured
// says whether there was one) with those on the after binary, in order.
func compare(name string, measured bool, before, after outcome) []line {
	bs, as := before.rows, after.rows
	var lines []line
	for i := range max(len(bs), len(as), 1) {
		l := line{name: name}
		if i < len(bs) {
			l.name, l.before, l.how = bs[i].name, bs[i].figure, bs[i].how
		}
		if i < len(as) {
			l.name, l.after, l.how = as[i].name, as[i].figure, as[i].how
		}
		switch {
		case !measured:
			l.before = "not measured (no `-before`)"
		case i >= len(bs):
			l.before = "n/a: " + cmp.Or(before.failed, "no such case")
		}
		if i >= len(as) {
			l.after = "n/a: " + cmp.Or(after.failed, "no such case")
		}
		lines = append(lines, l)
	}
	return lines
}

// printTable prints lines to stdout as a markdown table.
func printTable(lines []line) {
	fmt.Println()
	fmt.Println("| case | before | after | how measured |")
	fmt.Println("|---|---|---|---|")
	for _, l := range lines {
		fmt.Printf("| %s | %s | %s | %s |\n", l.name, l.before, l.after, l.how)
	}
}
