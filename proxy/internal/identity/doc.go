// Package identity turns a request's bearer token into verified claims,
// so that limits can be keyed and matched by who sent a request rather
// than where it came from (issue 37). It reads JWK Sets (RFC 7517) of
// public keys with go-jose (github.com/go-jose/go-jose/v4) and gives a
// token's claims by path.
package identity
