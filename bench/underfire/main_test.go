package main

import (
	"slices"
	"strings"
	"testing"
	"time"
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

func TestStatTicks(t *testing.T) {
	stat := "4242 (pre senced) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 9 0 100 123456 789 18446744073709551615\n"
	got, err := statTicks(stat)
	if err != nil {
		t.Fatalf("statTicks: %v", err)
	}
	if got != 287 {
		t.Errorf("statTicks = %d, want 250+37", got)
	}
	if _, err := statTicks("4242 (presenced) S 1 2"); err == nil {
		t.Error("statTicks of a short line: no error")
	}
}

func TestSpread(t *testing.T) {
	ds := []time.Duration{400 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond}
	if got, want := spread(ds), "median 0.35 s (0.20..0.50)"; got != want {
		t.Errorf("spread = %q, want %q", got, want)
	}
	if got := spread(nil); got != "none" {
		t.Errorf("spread(nil) = %q, want none", got)
	}
}
