//go:build lockorder

package lockorder_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/presenced/presenced/internal/lockorder"
)

func TestOutOfOrderPanics(t *testing.T) {
	var node lockorder.Mutex[lockorder.Node]
	var view lockorder.Mutex[lockorder.View]
	var conn lockorder.Mutex[lockorder.Conn]

	node.Lock()
	view.Lock() // in order
	conn.Lock()
	conn.Unlock()
	view.Unlock()
	node.Unlock()

	view.Lock()
	assert.PanicsWithValue(t, "lockorder: taking Node (rank 3) while holding View (rank 4)", node.Lock)
	view.Unlock()
	node.Lock() // nothing held now
	node.Unlock()

	var a, b lockorder.Mutex[lockorder.Conn]
	a.Lock()
	assert.Panics(t, b.Lock, "two locks of one rank: no order between them")
	a.Unlock()

	done := make(chan struct{})
	view.Lock()
	go func() { // another goroutine holds nothing
		defer close(done)
		node.Lock()
		node.Unlock()
	}()
	<-done
	view.Unlock()
}
