package perkey

import (
	"context"
	"time"
)

// Slots counts the requests in flight per client key of a concurrency
// limit (nginx's limit_conn, Traefik's inFlightReq): a request takes a
// slot before it is forwarded and gives it back when its answer has
// ended. Both stores implement it beside Store: the memory store counts
// slots; the Redis store holds each slot as a lease that lapses unless the
// instance holding it renews it, so that the slots of an instance that
// crashed free themselves within the lease. Implementations are safe for
// concurrent use.
type Slots interface {
	// Take takes one of the limit slots of key under the concurrency
	// limit name at instant now, or reports (false) that all are held.
	// An error means nothing was taken and the store could not say
	// (ErrStoreUnavailable); the Redis store follows its on_error then.
	Take(ctx context.Context, name, key string, limit int64, now time.Time) (Slot, bool, error)
	// Give gives s back. Giving the zero Slot does nothing; a Slot is
	// given back once.
	Give(s Slot)
}

// Slot is one slot taken by Slots.Take. The zero Slot holds nothing.
type Slot struct {
	Name, Key string
	// ID tells the slots of one key apart, and which store holds it: 0
	// for none.
	ID    uint64
	Local bool // taken from the Redis store's fallback (on_error "local")
}
