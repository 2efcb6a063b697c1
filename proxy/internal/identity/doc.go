// Package identity turns a request's bearer token into verified claims,
// so that limits can be keyed and matched by who sent a request rather
// than where it came from (issue 37). It is the verification core only:
// the configuration and the data path use it through New, Verify and
// Claims.Get.
//
// # What is verified
//
// A token is a JWT in JWS compact form (RFC 7515, RFC 7519), read from
// the Authorization header's Bearer credentials, another header or a
// cookie (Source). It is valid when all of these hold:
//   - its "alg" is in the allow-list (Config.Algorithms; by default
//     RS256, ES256 and EdDSA, and HS256 only when a shared secret is
//     configured);
//   - for a public-key algorithm, its "kid" names a key of the JWKS, of
//     the algorithm's family and curve (RSA for RS* and PS*, P-256 for
//     ES256 …, Ed25519 for EdDSA) and of the same "alg" if the key names
//     one, and the signature verifies with that key alone; for HMAC, the
//     signature verifies with Config.Secret alone;
//   - its payload is one JSON object with an "exp"; at the instant
//     given, it is not past "exp" nor before "nbf" or "iat" by more than
//     the leeway (Config.Leeway, 30 seconds by default: clocks of the
//     issuer and of limitproxy may differ that much);
//   - its "iss" is Config.Issuer and its "aud" holds one of
//     Config.Audience, when those are set.
//
// Anything else is Invalid, with a short fixed Reason for the log. A
// token that is not there at all is Missing, which is not an error:
// whether an anonymous request is limited, refused or keyed otherwise is
// for the caller to decide. Time is an argument, as everywhere in
// limitproxy: nothing here reads the clock to decide whether a token is
// valid.
//
// Signatures are verified by go-jose (github.com/go-jose/go-jose/v4);
// this package writes no signature code. Its ParseSignedCompact takes the
// allowed algorithms, so a token naming another is refused before any key
// is looked at. The registered claims are checked by go-jose's jwt
// package (ValidateWithLeeway), read from the same decoded payload that
// Claims gives, so what is checked and what is keyed on cannot differ.
//
// # Keys
//
// The keys are a JWK Set from a file (read once by New; a configuration
// reload makes a new Verifier) or a URL. A URL is fetched by New, again
// every Config.RefreshInterval (10 minutes), and when a token names a kid
// the set lacks, so that a newly published key is in use from its first
// token. That fetch is bounded: at most one per Config.MinRefetch (30
// seconds) however many unknown kids arrive, and concurrent callers share
// the one in flight, so a flood of tokens with made-up kids costs one
// fetch per MinRefetch, never one each. The price is that a key first
// used within MinRefetch of such a flood's fetch waits for the next one
// (at most MinRefetch, or the periodic refresh). After that fetch a token
// whose kid is still unknown is Invalid; no other key is tried. A fetch
// that fails (no answer within Config.FetchTimeout, a status other than
// 200, a body over 1 MiB or not a usable JWKS) keeps the last good set
// and is logged (Options.Log).
//
// Keys of a type go-jose does not know, and keys for encryption, are
// skipped (RFC 7517 §5) and logged; every other fault makes the whole set
// unusable: a key that does not parse, a symmetric or private key, a key
// without a kid or with a duplicate one, an RSA key under 2048 bits.
//
// # Cache
//
// A verified token is remembered by its SHA-256, with its claims and the
// instants between which it is valid (nbf or iat less the leeway, exp
// plus the leeway): a request that repeats a token costs a hash and a map
// look-up, with no allocation, instead of a full verification
// (BenchmarkVerify, on two shared cores: about 1 µs a hit, against 40 µs
// for HS256 and 80 to 150 µs for RS256, ES256 and EdDSA). The hash is
// cryptographic, so no token can be crafted to stand for another. The
// cache holds at most Config.CacheSize entries (10,000), evicting of 8
// sampled an expired one, else the one closest to its end. A fetched
// key set that differs from the one in use empties it, so a token
// verified under a key since removed from the JWKS is not answered from
// it. Invalid tokens are not remembered.
//
// # Security notes
//
// The algorithm is chosen by the configuration, never by the token. A
// token says which algorithm signed it, and trusting that is the root of
// the classic JWT forgeries: "alg": "none" (no signature at all), and
// the RS256 → HS256 confusion, where an attacker signs with HMAC using
// the server's RSA public key, which is public, as the secret. The
// allow-list refuses "none" always and every algorithm not configured.
// HMAC tokens are verified with the configured secret only, and a JWKS
// may not hold symmetric keys, so a public key can never serve as an
// HMAC secret whatever the token's header says; and a key is used only
// with the algorithms of its own family and curve, so a token whose
// header names RS256 is never checked against an EC key. Keys a token
// carries or points to (its "jwk", "jku", "x5u", "x5c" headers) are never
// used. Tokens must expire, so that a leaked token, and its cache entry,
// do not live forever. A JWKS URL must be https, or http to a loopback
// address: keys fetched in the clear could be anyone's.
package identity
