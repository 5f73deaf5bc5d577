package cluster_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/presenced/presenced/cluster"
	"github.com/presenced/presenced/transport"
)

// Example wires a cluster engine into a transport Hub: run the same program
// on several machines against one Redis and they share presence.
func Example() {
	rdb, err := cluster.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	engine, err := cluster.New(cluster.Config{Client: rdb, Timeout: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	hub, err := transport.New(transport.Config{Engine: engine})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: ":8080", Handler: hub, ReadHeaderTimeout: 5 * time.Second}
	go srv.ListenAndServe()

	// On shutdown: close the clients (1001), then drop this node's records so
	// its users go offline on the other nodes at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hub.Shutdown(ctx)
	_ = engine.Close(ctx)
}
