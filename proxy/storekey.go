package proxy

import (
	"crypto/sha256"
	"encoding/hex"
)

// StoreKey is the form in which a client key is kept by the penalty box
// and the per-key overrides (client keys are hashed before they are
// stored, docs/security-model.md): 32 hex digits of its SHA-256, the same on every instance and
// across restarts, so that a ban or an override found under it is the
// key's, and an operator who names the client (the admin API takes the
// raw key) finds it. SHA-256, unlike the limit stores' fast hash: a
// client who could make its key collide with another's could ban it.
func StoreKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// lenner is a store that knows how many entries it holds.
type lenner interface{ Len() int }

// empty reports whether store (a penalty box, an override store) holds
// nothing, so that a request need not hash its key to look.
func empty(store any) bool {
	l, ok := store.(lenner)
	return ok && l.Len() == 0
}
