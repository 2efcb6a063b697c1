package server

import (
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy/config"
)

// UnmatchedNote says, when no HTTP policy of cfg matches every request,
// what becomes of a request none matches ([server] unmatched); "" when
// one matches them all. When such requests are forwarded and a policy
// matches on headers or token claims, it says too that a client leaves
// that policy by not sending them: `limitproxy check` prints it, and a
// start and a reload that puts cfg in force log it as a warning
// (warnEscapes).
func UnmatchedNote(cfg *config.Config) string {
	if len(cfg.Upstreams) == 0 {
		return "" // the RLS alone: there is no proxy face to forward
	}
	for _, p := range cfg.Policies {
		if p.Match.All {
			return ""
		}
	}
	s := cfg.Server
	switch {
	case s.UnmatchedUpstream != "":
		note := fmt.Sprintf("no policy matches every request: a request none matches is forwarded to upstream %q, counted against no limit ([server] unmatched = \"forward\"; \"refuse\" answers it 404)", s.UnmatchedUpstream)
		if names := unmatchedEscapes(cfg); len(names) > 0 {
			note += "; " + escapesText(names)
		}
		return note
	case s.Unmatched == config.UnmatchedRefuse:
		return "no policy matches every request: a request none matches is answered 404 ([server] unmatched = \"refuse\")"
	}
	return fmt.Sprintf("no policy matches every request: a request none matches is answered 404, since there are %d upstreams and [server] unmatched_upstream names none to forward it to", len(cfg.Upstreams))
}

// unmatchedEscapes names, quoted, the HTTP policies of cfg that a client
// can leave for the unlimited forwarding of unmatched requests while
// asking for the same resource, by not sending a header or a token claim
// they match on; none when no request is forwarded so (a catch-all
// policy, unmatched = "refuse", no upstream to forward to).
func unmatchedEscapes(cfg *config.Config) []string {
	if cfg.Server.UnmatchedUpstream == "" {
		return nil
	}
	for _, p := range cfg.Policies {
		if p.Match.All {
			return nil
		}
	}
	var out []string
	for _, p := range cfg.Policies {
		if !p.Match.RLS() && (len(p.Match.Headers) > 0 || len(p.Match.Claims) > 0) {
			out = append(out, fmt.Sprintf("%q", p.Name))
		}
	}
	return out
}

// warnEscapes logs at warn, once, that a client leaves the policies of
// cfg that unmatchedEscapes names (escapesText), if any: when a start or
// a reload puts cfg in force.
func warnEscapes(log *zap.Logger, cfg *config.Config) {
	if names := unmatchedEscapes(cfg); len(names) > 0 {
		log.Warn(escapesText(names))
	}
}

// escapesText is the warning about unmatchedEscapes' policies.
func escapesText(names []string) string {
	return fmt.Sprintf("a client leaves policy %s for unlimited forwarding by not sending the headers or token claims it matches on: add a catch-all policy, or set [server] unmatched = \"refuse\"", strings.Join(names, ", "))
}
