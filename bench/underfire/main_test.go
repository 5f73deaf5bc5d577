package main

import (
	"slices"
	"strings"
	"testing"
)

func TestKnown(t *testing.T) {
	r := &run{
		bin:     &binary{label: "after", flags: map[string]bool{"addr": true, "slots": true}},
		dropped: map[string]bool{},
	}
	got, err := r.known([]string{"-addr", "127.0.0.1:1", "-queue-bytes", "1024", "-slots", "11"})
	if err != nil {
		t.Fatalf("known: %v", err)
	}
	if want := []string{"-addr", "127.0.0.1:1", "-slots", "11"}; !slices.Equal(got, want) {
		t.Errorf("known = %q, want %q", got, want)
	}
	if !r.dropped["queue-bytes"] {
		t.Errorf("dropped = %v, want queue-bytes in it", r.dropped)
	}
	if _, err := r.known([]string{"-jwt-secret", "s"}); err == nil || !strings.Contains(err.Error(), "`-jwt-secret`") {
		t.Errorf("known of a flag the binary lacks: err = %v, want one naming `-jwt-secret`", err)
	}
	if _, err := r.known([]string{"-slots"}); err == nil {
		t.Error("known of an odd number of args: no error")
	}
}

func TestCompare(t *testing.T) {
	rows := []row{{"4a", "0 in 30", "how a"}, {"4b", "1 in 30", "how b"}}
	got := compare("reconnect", true, outcome{failed: "no such flag"}, outcome{rows: rows})
	want := []line{
		{"4a", "n/a: no such flag", "0 in 30", "how a"},
		{"4b", "n/a: no such flag", "1 in 30", "how b"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("compare, before failed:\n got %q\nwant %q", got, want)
	}
	got = compare("cap", false, outcome{}, outcome{failed: "cap exited at start"})
	want = []line{{"cap", "not measured (no `-before`)", "n/a: cap exited at start", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("compare, no before, after failed:\n got %q\nwant %q", got, want)
	}
}
