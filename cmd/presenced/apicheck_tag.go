//go:build apicheck

package main

import "github.com/presenced/presenced/internal/apicheck"

// A presenced built for the tests with -tags apicheck checks every frame
// it reads and writes against docs/schema, and reports to the file
// $APICHECK_REPORT names. Other builds link none of it.
func init() { apicheck.Report() }
