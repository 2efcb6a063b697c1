package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// loadOverrides reads the per-key overrides a replay applies from path:
// the memory store's overrides file ([store] overrides_file, read
// without being written: the proxy may be using it), or what the admin
// API's GET /api/v1/overrides answered ({"overrides":[…]}, for the Redis
// store). Either holds keys hashed, as the proxy looks them up. The
// overrides are returned in a memory-only store, which every
// configuration of the replay reads.
func loadOverrides(path string) (perkey.Overrides, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("overrides %w", err)
	}
	var list []perkey.Override
	if isListing(b) {
		list, err = readListing(path, b)
	} else {
		list, err = memstore.ReadOverrides(path)
	}
	if err != nil {
		return nil, err
	}
	s, err := memstore.NewOverrides(memstore.OverrideOptions{MaxOverrides: max(len(list), 1)})
	if err != nil {
		return nil, err
	}
	for _, o := range list {
		if err := s.Set(context.Background(), o); err != nil {
			return nil, fmt.Errorf("overrides %s: policy %q key %q: %w", path, o.Policy, o.Key, err)
		}
	}
	return s, nil
}

// isListing reports whether b is an admin API listing rather than an
// overrides file, whose first line is its header.
func isListing(b []byte) bool {
	var probe struct {
		Overrides json.RawMessage `json:"overrides"`
	}
	return json.Unmarshal(b, &probe) == nil && probe.Overrides != nil
}

// readListing reads the admin API's {"overrides":[…]}: each an override
// in its JSON form with the listing's "orphaned" beside it.
func readListing(path string, b []byte) ([]perkey.Override, error) {
	var listing struct {
		Overrides []map[string]json.RawMessage `json:"overrides"`
	}
	if err := json.Unmarshal(b, &listing); err != nil {
		return nil, fmt.Errorf("overrides %s: %w", path, err)
	}
	list := make([]perkey.Override, 0, len(listing.Overrides))
	for i, m := range listing.Overrides {
		delete(m, "orphaned")
		raw, err := json.Marshal(m)
		if err == nil {
			var o perkey.Override
			if err = o.UnmarshalJSON(raw); err == nil {
				list = append(list, o)
				continue
			}
		}
		return nil, fmt.Errorf("overrides %s: overrides[%d]: %w", path, i, err)
	}
	return list, nil
}
