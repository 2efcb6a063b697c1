package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
)

// MinKeyHashSecret is the shortest secret NewKeyHasher takes, in bytes.
const MinKeyHashSecret = 16

// KeyHasher computes the key hash: how a client key is shown wherever
// limitproxy shows one hashed (the admin API's top offenders, bans and
// overrides, `limitproxy replay`, the access log's key field). It is 16
// hex digits of HMAC-SHA-256 of the key's stored form (StoreKey) under a
// secret, so that a ban or an override, which the stores keep only in
// that form, shows the same hash as the key's requests do. Without the
// secret the hash cannot be reversed by hashing every address. The zero
// value is not usable; a *KeyHasher is safe for concurrent use.
type KeyHasher struct {
	// ipad and opad are the secret's HMAC blocks (RFC 2104): the hash is
	// computed on the stack, without hmac.New's allocations, as the
	// access log computes one per request.
	ipad, opad [sha256.BlockSize]byte
}

// NewKeyHasher returns a KeyHasher under secret, which must be at least
// MinKeyHashSecret bytes; a nil secret draws a random one (hashes then
// change with each KeyHasher).
func NewKeyHasher(secret []byte) *KeyHasher {
	if secret == nil {
		secret = make([]byte, 32)
		rand.Read(secret) // never fails (crypto/rand, go1.24+)
	}
	var key [sha256.BlockSize]byte
	if len(secret) > sha256.BlockSize {
		sum := sha256.Sum256(secret)
		copy(key[:], sum[:])
	} else {
		copy(key[:], secret)
	}
	h := &KeyHasher{}
	for i, b := range key {
		h.ipad[i], h.opad[i] = b^0x36, b^0x5c
	}
	return h
}

// maxHashed is the longest message sum hashes on the stack: a stored key
// (32 hex digits) or "addr:" and an IPv6 address's text.
const maxHashed = 64

// sum returns 16 hex digits of HMAC-SHA-256 of msg (at most maxHashed
// bytes) under h's secret.
func (h *KeyHasher) sum(msg []byte) string {
	mac := h.mac(msg)
	return hex.EncodeToString(mac[:])
}

// mac returns the first 8 bytes of HMAC-SHA-256 of msg (at most maxHashed
// bytes) under h's secret.
func (h *KeyHasher) mac(msg []byte) [8]byte {
	var in [sha256.BlockSize + maxHashed]byte
	copy(in[:], h.ipad[:])
	n := copy(in[sha256.BlockSize:], msg)
	inner := sha256.Sum256(in[:sha256.BlockSize+n])
	var out [sha256.BlockSize + sha256.Size]byte
	copy(out[:], h.opad[:])
	copy(out[sha256.BlockSize:], inner[:])
	mac := sha256.Sum256(out[:])
	return [8]byte(mac[:8])
}

// Key returns the key hash of a client key as the limiters see it.
func (h *KeyHasher) Key(key string) string {
	mac := h.keyMAC(key)
	return hex.EncodeToString(mac[:])
}

// appendKey appends Key(key) to b.
func (h *KeyHasher) appendKey(b []byte, key string) []byte {
	mac := h.keyMAC(key)
	return hex.AppendEncode(b, mac[:])
}

func (h *KeyHasher) keyMAC(key string) [8]byte {
	sum := sha256.Sum256([]byte(key))
	var stored [32]byte
	hex.Encode(stored[:], sum[:16]) // StoreKey, on the stack
	return h.mac(stored[:])
}

// Stored returns the key hash of a client key in its stored form, as the
// penalty box and the overrides keep it (StoreKey).
func (h *KeyHasher) Stored(storeKey string) string {
	if len(storeKey) > maxHashed {
		// Not a stored key (which is 32 hex digits); hashed all the same.
		sum := sha256.Sum256([]byte(storeKey))
		var b [64]byte
		hex.Encode(b[:], sum[:])
		return h.sum(b[:]) // a different message than any stored key's
	}
	return h.sum([]byte(storeKey))
}

// Addr returns the hash of a client address, as the access log shows it
// with [log] client_address = "hashed": 16 hex digits of HMAC-SHA-256
// under the same secret, of the address in its text form behind a prefix
// that no stored key has, so that it never equals a key's hash.
func (h *KeyHasher) Addr(a netip.Addr) string {
	var b [maxHashed]byte
	msg := append(b[:0], "addr:"...)
	msg = a.Unmap().AppendTo(msg)
	return h.sum(msg)
}

// Value returns the hash of a value a client key is built from, as the
// access log shows it with [log] access_replay = "hashed": 16 hex digits
// of HMAC-SHA-256 under the same secret, of the value's SHA-256 (its
// first 16 bytes, as hex) behind a prefix no stored key and no address
// has; "" for "" (an empty value is a missing one, and stays one). Equal
// values have equal hashes, so a replay keys by them as the proxy keyed
// by the values.
func (h *KeyHasher) Value(v string) string {
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	var b [maxHashed]byte
	msg := append(b[:0], "value:"...)
	msg = hex.AppendEncode(msg, sum[:16])
	return h.sum(msg)
}
