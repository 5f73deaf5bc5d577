//go:build ignore

// gen_client builds client/presenced.js from the modules in client/src; go
// generate runs it.
package main

import (
	"log"
	"os"

	"github.com/presenced/presenced/web/internal/jsbundle"
)

func main() {
	out, err := jsbundle.Client(os.DirFS("client/src"))
	if err != nil {
		log.Fatalf("build client/presenced.js: %v", err)
	}
	if err := os.WriteFile("client/presenced.js", out, 0o644); err != nil {
		log.Fatalf("build client/presenced.js: %v", err)
	}
}
