package envoyimport

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// noLimit is what a policy without limit is written as, in its comment.
const noLimit = "OK for every call, as the reference's answer without a limit"

// render writes the TOML of the policies of each domain.
func render(files []Input, domains []*Domain, perDomain [][]*policy, warnings []Warning, o Options) []byte {
	var b bytes.Buffer
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	fmt.Fprintf(&b, `# Imported from envoyproxy/ratelimit configuration by limitproxy import:
#   %s
# Each [[policy]] answers the descriptors of one path of a domain's tree
# (docs/envoy.md). The first policy of a domain whose descriptor matches
# decides, and the order below is the reference's lookup: a value before
# a wildcard before the bare key, level by level, never going back up.
# A policy "without limit" (a shadow limit that nothing reaches: an RLS
# policy needs one) ends a lookup where the reference's finds none.
# Each limit is a fixed window of the unit, aligned to the Unix epoch as
# the reference aligns it (a month is 30 days, a year 365).
`, strings.Join(names, "\n#   "))
	if len(warnings) > 0 {
		b.WriteString("#\n# Not carried over (each also noted at its policy):\n")
		for _, w := range warnings {
			fmt.Fprintf(&b, "#   %s\n", comment(w.String()))
		}
	}
	listen := o.Listen
	if listen == "" {
		listen = DefaultListen
	}
	fmt.Fprintf(&b, "\n[rls]\nlisten = %s\n", quote(listen))
	for i, d := range domains {
		fmt.Fprintf(&b, "\n# domain %s (%s)\n", comment(quote(d.Name)), comment(d.File))
		if len(perDomain[i]) == 0 {
			b.WriteString("# no descriptor with a limit: every call of this domain is OK\n")
		}
		for _, p := range perDomain[i] {
			b.WriteString("\n")
			for _, n := range p.notes {
				fmt.Fprintf(&b, "# NOTE %s\n", comment(n))
			}
			if p.limit == nil {
				// An RLS policy needs a limit: one in shadow mode, under
				// one key, that no traffic reaches, answers OK always.
				fmt.Fprintf(&b, "# no limit: %s\n", comment(p.why))
				fmt.Fprintf(&b, "[[policy]]\nname = %s\nmode = \"shadow\"  # never refuses: %s\nkey = []\n", quote(p.name), noLimit)
				fmt.Fprintf(&b, "[policy.match]\nrls_domain = %s\ndescriptor = %s\n", quote(p.domain), quoteList(p.descriptor))
				fmt.Fprintf(&b, "[[policy.limits]]\nname = \"unlimited\"\nalgorithm = \"fixed_window\"\nlimit = %d\nwindow = \"1s\"\n", maxCount)
				continue
			}
			fmt.Fprintf(&b, "[[policy]]\nname = %s\n", quote(p.name))
			if p.shadow {
				b.WriteString("mode = \"shadow\"\n")
			}
			if p.key != nil {
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

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
