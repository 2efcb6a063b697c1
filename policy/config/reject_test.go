package config

import (
	"strings"
	"testing"
)

// TestRejectContentTypeFieldValue: [policy.reject] content_type becomes
// a Content-Type field's value, and a value with CR, LF or NUL is not a
// field value (RFC 9110 §5.5). The configuration takes it as it is;
// net/http's HTTP/1 server then writes CR and LF as spaces and NUL as it
// is, and its HTTP/2 server leaves the field out (h2_bundle's
// encodeHeaders drops values httpguts.ValidHeaderFieldValue refuses), so
// that the same policy answers with a different Content-Type, or none,
// depending on the protocol. A multi-line TOML string (a trailing
// newline) or an environment value is enough to get one.
//
// Since fixed: such a value is refused at its position.
func TestRejectContentTypeFieldValue(t *testing.T) {
	for _, ct := range []string{
		`"text/plain\r\nSet-Cookie: a=1"`,
		`"""` + "\ntext/plain\n" + `"""`, // a multi-line string: "text/plain\n"
		`"text/plain\u0000"`,
	} {
		err := parseRejectContentType(ct)
		if err == nil || !strings.Contains(err.Error(), "reject.content_type: ") || !strings.Contains(err.Error(), "is not a header field value") {
			t.Errorf("content_type = %s: accepted (err %v); want it refused as not a field value", ct, err)
		}
	}
	// Field values load as they are, a tab and obs-text included.
	for _, ct := range []string{`"text/plain"`, `"application/problem+json"`, `"text/plain;\tcharset=utf-8"`, `"text/x-caf\u00e9"`} {
		if err := parseRejectContentType(ct); err != nil {
			t.Errorf("content_type = %s: %v", ct, err)
		}
	}
}

// parseRejectContentType parses a policy whose [policy.reject] has a
// body and content_type = ct (TOML).
func parseRejectContentType(ct string) error {
	return parseReject(`  body = "slow down"
  content_type = ` + ct + "\n")
}

// TestRejectEmptyBody: [policy.reject] body = "" was taken as a custom
// body (content_type defaulting to "text/plain; charset=utf-8"), while
// the proxy takes "" for "the problem+json one": the answer was
// problem+json labelled text/plain, which a client that looks for
// application/problem+json (docs/responses.md) does not recognise.
//
// Since fixed: refused at its position, saying to leave it out.
func TestRejectEmptyBody(t *testing.T) {
	err := parseReject(`  body = ""` + "\n")
	const want = `reject.toml:12:3: policy "all" reject.body: is empty: leave body out for the problem+json body`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("body = \"\": %v; want %s", err, want)
	}
}

// parseReject parses a policy of one limit whose [policy.reject]
// table's keys are keys (TOML lines).
func parseReject(keys string) error {
	_, err := Parse("reject.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  [policy.reject]
`+keys))
	return err
}
