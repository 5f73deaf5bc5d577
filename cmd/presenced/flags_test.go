package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

func TestVersion(t *testing.T) {
	var out, errs bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"-version"}, func(string) string { return "" }, &out, &errs), errs.String())
	assert.Regexp(t, `^presenced \S.* protocol `+regexp.QuoteMeta(protocol.Version)+`\n$`, out.String())
	assert.Empty(t, errs.String(), "no start-up lines: it only prints")
}

// TestReadmeListsEveryFlag keeps the README's table of flags and the
// command's table the same: every flag with its variable, and its default
// where the README names one.
func TestReadmeListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	documented := map[string]string{} // flag -> its row's default cell
	var variables []string
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, "|")[1:]
		if !strings.HasPrefix(line, "| `-") || len(cells) < 4 {
			continue
		}
		for _, f := range regexp.MustCompile("`-([a-z-]+)`").FindAllStringSubmatch(cells[0], -1) {
			documented[f[1]] = cells[2]
		}
		variables = append(variables, regexp.MustCompile("`PRESENCED_[A-Z_]+`").FindAllString(cells[1], -1)...)
	}
	require.NotEmpty(t, documented, "README.md's table of flags")
	var o options
	var names []string
	for _, s := range o.settings() {
		if s.reset != nil {
			s.reset()
		}
		names = append(names, s.name)
		cell, ok := documented[s.name]
		if !assert.True(t, ok, "README.md has no row for -%s", s.name) {
			continue
		}
		if s.flagOnly {
			assert.NotContains(t, variables, "`"+envName(s.name)+"`", "-%s is a flag only", s.name)
		} else {
			assert.Contains(t, variables, "`"+envName(s.name)+"`", "-%s's variable", s.name)
		}
		// The default the README names, read as the flag reads it, is the
		// flag's: "24h" and "24h0m0s" agree.
		def := regexp.MustCompile("`([^`]+)`").FindStringSubmatch(cell)
		if s.name == "addr" || def == nil || strings.Contains(cell, ",") {
			continue
		}
		var readme options
		for _, r := range readme.settings() {
			if r.name == s.name && assert.NoError(t, r.value.Set(def[1]), "-%s's default in README.md", s.name) {
				assert.Equal(t, s.value.String(), r.value.String(), "-%s's default in README.md", s.name)
			}
		}
	}
	for f := range documented {
		assert.True(t, slices.Contains(names, f), "README.md documents -%s, which the command does not have", f)
	}
}
