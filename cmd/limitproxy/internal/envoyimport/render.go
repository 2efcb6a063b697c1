package envoyimport

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// render writes the TOML of the policies of each domain; depth is the
// most entries of a policy's descriptor.
func render(files []Input, domains []*Domain, perDomain [][]*policy, warnings []Warning, o Options, depth int) []byte {
	var b bytes.Buffer
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	fmt.Fprintf(&b, `# Imported from envoyproxy/ratelimit configuration by limitproxy import:
#   %s
# Each [[policy]] answers the descriptors of one path of a domain's tree
# (docs/envoy.md, "Migrating from envoyproxy/ratelimit"). The first
# policy of a domain whose descriptor matches decides, and the order below
# is the reference's lookup: a value before a wildcard before the bare
# key, level by level, never going back up. A policy without limits ends
# a lookup where the reference's finds no limit (OK, as it answers).
# Each limit is a fixed window of the unit, aligned to the Unix epoch as
# the reference aligns it (a month is 30 days, a year 365), and [rls]
# answers as the reference does (compatibility).
`, strings.Join(names, "\n#   "))
	if len(warnings) > 0 {
		b.WriteString("#\n# Not carried over as the reference has it (each also noted at its policy):\n")
		for _, w := range warnings {
			fmt.Fprintf(&b, "#   %s\n", comment(w.String()))
		}
	}
	listen := o.Listen
	if listen == "" {
		listen = DefaultListen
	}
	fmt.Fprintf(&b, "\n[rls]\nlisten = %s\n", quote(listen))
	b.WriteString("compatibility = \"envoyproxy/ratelimit\"  # its answers, in every field\n")
	st := o.Settings
	if st.ResponseHeaders {
		b.WriteString("response_headers = \"envoy\"  # LIMIT_RESPONSE_HEADERS_ENABLED=true\n")
		for _, h := range []struct{ key, name, env string }{
			{"limit_header", st.LimitHeader, "LIMIT_LIMIT_HEADER"},
			{"remaining_header", st.RemainingHeader, "LIMIT_REMAINING_HEADER"},
			{"reset_header", st.ResetHeader, "LIMIT_RESET_HEADER"},
		} {
			if h.name != "" {
				fmt.Fprintf(&b, "%s = %s  # %s\n", h.key, quote(h.name), h.env)
			}
		}
	} else {
		b.WriteString("response_headers = \"none\"  # LIMIT_RESPONSE_HEADERS_ENABLED=false, its default\n")
	}
	if st.ShadowMode {
		b.WriteString("shadow_mode = true  # SHADOW_MODE\n")
	}
	if st.QuotaMode {
		b.WriteString("quota_mode = true  # QUOTA_MODE\n")
	}
	if st.DynamicMetadata {
		b.WriteString("dynamic_metadata = true  # RESPONSE_DYNAMIC_METADATA\n")
	}
	if st.StopIncrement {
		b.WriteString("stop_increment_when_over_limit = true  # STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT\n")
	}
	if st.ExpirationJitterMax > 0 {
		fmt.Fprintf(&b, "expiration_jitter_max = \"%ds\"  # EXPIRATION_JITTER_MAX_SECONDS\n", st.ExpirationJitterMax)
	}
	if o.JoinedKeys {
		b.WriteString("count_keys = \"joined\"  # the reference's counts: keys and values joined with '_' (a=b_c and a_b=c share one)\n")
		b.WriteString("lookup = \"joined\"  # the reference's lookup by KEY_VALUE: the policies below are its tree of descriptors, in its order\n")
	}
	// The reference has no bounds of a call: the widest limitproxy has.
	fmt.Fprintf(&b, "max_hits_addend = %d\nmax_descriptors = 1024\n", maxCount)
	if depth > 16 {
		fmt.Fprintf(&b, "max_entries = %d\n", depth)
	}
	for i, d := range domains {
		fmt.Fprintf(&b, "\n# domain %s (%s)\n", comment(quote(d.Name)), comment(d.File))
		for _, p := range perDomain[i] {
			b.WriteString("\n")
			for _, n := range p.notes {
				fmt.Fprintf(&b, "# NOTE %s\n", comment(n))
			}
			if p.why != "" {
				fmt.Fprintf(&b, "# no limit: %s\n", comment(p.why))
			}
			fmt.Fprintf(&b, "[[policy]]\nname = %s\n", quote(p.name))
			if p.shadow {
				b.WriteString("mode = \"shadow\"\n")
			}
			if p.unlimited {
				b.WriteString("unlimited = true\n")
			}
			if p.quota {
				b.WriteString("quota_mode = true\n")
			}
			if len(p.replaces) > 0 {
				rs := make([]string, len(p.replaces))
				for i, r := range p.replaces {
					rs[i] = limitName(r)
				}
				fmt.Fprintf(&b, "replaces = %s\n", quoteList(rs))
			}
			if p.metadata != nil {
				fmt.Fprintf(&b, "metadata = %s\n", tomlValue(p.metadata))
			}
			if p.toMetric != nil {
				fmt.Fprintf(&b, "value_to_metric = %s  # the reference's: its metadata is sent only as its lookup keeps it\n", quoteList(p.toMetric))
			}
			if p.key != nil && p.limit != nil {
				fmt.Fprintf(&b, "key = %s\n", quoteList(p.key))
			}
			fmt.Fprintf(&b, "[policy.match]\nrls_domain = %s\ndescriptor = %s\n", quote(p.domain), quoteList(p.descriptor))
			if l := p.limit; l != nil {
				b.WriteString("[[policy.limits]]\n")
				if l.Name != "" {
					fmt.Fprintf(&b, "name = %s\n", quote(limitName(l.Name)))
				}
				fmt.Fprintf(&b, "algorithm = \"fixed_window\"\nlimit = %d\nwindow = %s  # per %s\n", l.RequestsPerUnit, quote(window(l.Unit)), l.Unit)
			}
		}
	}
	return b.Bytes()
}

// comment keeps s on one comment line.
func comment(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
}

// quote is s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlValue is v, a YAML value with string keys, as a TOML value: a
// table inline, keys sorted; a null is left out (TOML has none).
func tomlValue(v interface{}) string {
	switch v := v.(type) {
	case map[string]interface{}:
		keys := make([]string, 0, len(v))
		for k, e := range v {
			if e != nil {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = quote(k) + " = " + tomlValue(v[k])
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case []interface{}:
		var parts []string
		for _, e := range v {
			if e != nil {
				parts = append(parts, tomlValue(e))
			}
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		return quote(v)
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		if v > math.MaxInt64 {
			return tomlFloat(float64(v))
		}
		return strconv.FormatUint(v, 10)
	case float64:
		return tomlFloat(v)
	}
	return quote(fmt.Sprint(v))
}

func tomlFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// hasNull reports whether v holds a null.
func hasNull(v interface{}) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]interface{}:
		for _, e := range v {
			if hasNull(e) {
				return true
			}
		}
	case []interface{}:
		for _, e := range v {
			if hasNull(e) {
				return true
			}
		}
	}
	return false
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
