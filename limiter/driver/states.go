package driver

import "time"

// States is an array of per-key states of one limit, which a Store holds
// and indexes as it likes (the memory store: beside the slots of its hash
// table), made by Limit.NewStates. Each state is its algorithm's own
// value, held inline: 16 bytes for a token bucket or a fixed window, 8
// for a leaky bucket (its queue is the Store's), 40 for a sliding log
// (plus 8 bytes per entry, apart) and 8 + 4·(Slots+1) for a sliding
// window, rounded up to 16, 40 or 272 bytes. The zero state is a fresh
// key's. The Limit's Step, Peek, Charge and IdleAt read and change the
// states; a Store only moves them. A States is not safe for concurrent
// use: the Store serialises the calls on one array.
type States interface {
	// Make returns a new array of n fresh states of the same kind, to
	// grow or shrink a table with.
	Make(n int) States
	// Copy sets state dst to state src of from, an array of the same
	// kind (made by Make or by a Limit of the same Name).
	Copy(dst int, from States, src int)
	// Move sets state dst to state src, and src to a fresh key's.
	Move(dst, src int)
	// Clear sets state i to a fresh key's, releasing what it held.
	Clear(i int)
}

// array is the States of an algorithm whose per-key state is S.
type array[S any] []S

func (a array[S]) Make(n int) States { return make(array[S], n) }

func (a array[S]) Copy(dst int, from States, src int) { a[dst] = from.(array[S])[src] }

func (a array[S]) Move(dst, src int) {
	a[dst] = a[src]
	a.Clear(src)
}

func (a array[S]) Clear(i int) {
	var fresh S
	a[i] = fresh
}

// stateAt returns state i of st, an array of S, or fresh if st is nil.
func stateAt[S any](st States, i int, fresh *S) *S {
	if st == nil {
		return fresh
	}
	return &st.(array[S])[i]
}

// Queue is what a Store tells the step of a queued algorithm (the leaky
// bucket, Limit.Queued) about the requests of one key waiting in its
// queue. The Store keeps the queue itself (its FIFO, its release timer,
// its clock); the step only decides. The zero value is a key with no
// queue.
type Queue struct {
	// Busy: the queue's release timer runs (requests wait, or the last
	// release holds the exit closed for its spacing).
	Busy bool
	// Gate is when the exit reopens for the next release; for a queue that
	// is not busy, when it reopened last (zero: never).
	Gate time.Time
	// Waiting is how many requests wait; Pending the exit time they hold
	// together (the sum of their spacings).
	Waiting int64
	Pending time.Duration
	// FreeAt is when a place frees in a full queue: the release of waiter
	// Waiting − QueueSize (0 = the head) if nobody leaves early. Read
	// only when Waiting ≥ QueueSize.
	FreeAt time.Time
}
