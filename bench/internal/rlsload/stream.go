// Package rlsload sends streams of descriptors to an Envoy rate limit
// service and measures its answers: the decisions per second, the latency
// and the sequence of codes.
package rlsload

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// ParseStream reads a descriptor stream: one call per line,
//
//	DOMAIN DESCRIPTOR [DESCRIPTOR...]
//
// where a DESCRIPTOR is KEY=VALUE entries joined by ',' (an entry without
// '=' has an empty value), each KEY and VALUE %-escaped as a URL path
// segment (%20 for a space, %2C for a comma). Blank lines and lines
// starting with '#' are skipped.
func ParseStream(r io.Reader) ([]*rlsv3.RateLimitRequest, error) {
	var calls []*rlsv3.RateLimitRequest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want a domain and at least one descriptor", line)
		}
		domain, err := url.PathUnescape(f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: domain: %w", line, err)
		}
		req := &rlsv3.RateLimitRequest{Domain: domain}
		for _, d := range f[1:] {
			desc := &rlcommon.RateLimitDescriptor{}
			for _, e := range strings.Split(d, ",") {
				k, v, _ := strings.Cut(e, "=")
				key, err1 := url.PathUnescape(k)
				value, err2 := url.PathUnescape(v)
				if err1 != nil || err2 != nil {
					return nil, fmt.Errorf("line %d: bad escape in %q", line, e)
				}
				desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: key, Value: value})
			}
			req.Descriptors = append(req.Descriptors, desc)
		}
		calls = append(calls, req)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("no calls in the stream")
	}
	return calls, nil
}

// ReadStream reads the descriptor stream in the file at path
// (ParseStream); a parse error names the file.
func ReadStream(path string) ([]*rlsv3.RateLimitRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	stream, err := ParseStream(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return stream, nil
}
