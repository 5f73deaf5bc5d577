package tracker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/presenced/presenced/tracker"
)

// A chat server touches a user on every packet; a user silent for a whole
// turn of the ring is reported offline. Advance steps the ring by hand, as a
// test would; a server calls Run instead.
func Example() {
	t, err := tracker.New(tracker.Config[string]{
		Slots: 4, // a 3 s timeout with the default 1 s tick
	})
	if err != nil {
		panic(err)
	}
	defer t.Close()

	t.Touch("alice")
	t.Touch("bob")
	for step := 1; step <= 4; step++ {
		t.Touch("bob") // bob keeps talking
		fmt.Println("step", step, "timed out:", t.Advance())
	}
	fmt.Println("alice online:", t.Online("alice"), "bob online:", t.Online("bob"))
	// Output:
	// step 1 timed out: []
	// step 2 timed out: []
	// step 3 timed out: []
	// step 4 timed out: [alice]
	// alice online: false bob online: true
}

// TouchFor gives one key its own timeout, here far longer than a turn of the
// ring: the ring counts the turns.
func ExampleTracker_TouchFor() {
	t, err := tracker.New(tracker.Config[string]{Slots: 31})
	if err != nil {
		panic(err)
	}
	defer t.Close()

	t.TouchFor("report", 3610*time.Second) // due at step 3611
	steps := 0
	for t.Online("report") {
		t.Advance()
		steps++
	}
	fmt.Println("reported at step", steps)
	// Output: reported at step 3611
}

// Run steps the ring from the wall clock; OnIdle is the place for a probe,
// such as a WebSocket ping, before the key times out.
func ExampleTracker_Run() {
	done := make(chan struct{})
	t, err := tracker.New(tracker.Config[int]{
		Slots:     5,
		Tick:      10 * time.Millisecond, // a 40 ms timeout
		IdleAfter: 15 * time.Millisecond,
		OnIdle:    func(conn int) { fmt.Println("ping", conn) },
		OnOffline: func(conn int) { fmt.Println("close", conn); close(done) },
	})
	if err != nil {
		panic(err)
	}
	defer t.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go t.Run(ctx)

	t.Touch(7)
	<-done
	// Output:
	// ping 7
	// close 7
}

// Ring shows where the cursor is and how many keys fall due in each slot.
func ExampleTracker_Ring() {
	t, err := tracker.New(tracker.Config[string]{Slots: 5})
	if err != nil {
		panic(err)
	}
	defer t.Close()
	t.Advance()
	t.Touch("a") // due in the slot just behind the cursor
	t.Touch("b")
	r := t.Ring()
	fmt.Println("cursor", r.Cursor, "due", r.Due)
	// Output: cursor 1 due [2 0 0 0 0]
}
