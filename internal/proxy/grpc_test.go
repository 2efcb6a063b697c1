package proxy

import (
	"net/http"
	"testing"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":               true,
		"application/grpc+proto":         true,
		"application/grpc+raw":           true,
		"application/grpc; charset=utf8": true,
		"application/grpc-web":           false,
		"application/grpc-web+proto":     false,
		"application/json":               false,
		"":                               false,
		"application/grpcx":              false,
	} {
		r := &http.Request{Header: http.Header{"Content-Type": {ct}}}
		if got := isGRPC(r); got != want {
			t.Errorf("isGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestGRPCMessage: grpc-message percent-encodes every byte outside
// printable ASCII, and '%' (the gRPC HTTP/2 protocol's Percent-Encoded).
func TestGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"quota exceeded: policy api": "quota exceeded: policy api",
		"100% used":                  "100%25 used",
		"line\nbreak":                "line%0Abreak",
		"café":                       "caf%C3%A9",
		"":                           "",
	} {
		if got := grpcMessage(in); got != want {
			t.Errorf("grpcMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
