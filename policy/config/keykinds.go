package config

import (
	"errors"
	"fmt"
	"strings"
)

// keyKinds is every kind of key part, in one place: its name in a key
// list, the NAME it takes after a colon (if any) and how that is checked.
// A new kind of key part is a KeyKind constant, an entry here, and its
// reader in proxy/internal/clientkey (kinds.go); String, parseKeyPart
// and the error that lists the kinds follow this table.
var keyKinds = [...]struct {
	name string
	// syntax is what follows the colon ("NAME", "KEY"); "" for a kind
	// that takes no name.
	syntax string
	// where, if not "", says where alone the kind may be used (the
	// key-part error's list says it).
	where string
	// check, if not nil, checks a kind's name and returns it in the
	// form the data path reads it by.
	check func(name string) (string, error)
}{
	KeyIP:     {name: "ip"},
	KeyHost:   {name: "host"},
	KeyMethod: {name: "method"},
	KeyPath:   {name: "path"},
	KeyHeader: {name: "header", syntax: "NAME", check: func(name string) (string, error) {
		if !validToken(name) {
			return "", fmt.Errorf("%q is not a header name", name)
		}
		h := canonicalHeader(name)
		if isClientAddressHeader(h) {
			return "", errors.New(h + " " + errClientAddressKey)
		}
		return h, nil
	}},
	KeyQuery: {name: "query", syntax: "NAME"},
	KeyCookie: {name: "cookie", syntax: "NAME", check: func(name string) (string, error) {
		if !validToken(name) {
			return "", fmt.Errorf("%q is not a cookie name", name)
		}
		return name, nil
	}},
	KeyDescriptor: {name: "descriptor", syntax: "KEY", where: "in an RLS policy"},
	KeyJWT: {name: "jwt", syntax: "CLAIM", check: func(name string) (string, error) {
		if !ClaimPath(name) {
			return "", fmt.Errorf("%q is not a claim path (names joined by dots: \"sub\", \"org.id\")", name)
		}
		return name, nil
	}},
}

// ClaimPath reports whether p is a claim path: one or more non-empty
// names joined by dots, without spaces or control characters.
func ClaimPath(p string) bool {
	if p == "" {
		return false
	}
	for _, name := range strings.Split(p, ".") {
		if name == "" {
			return false
		}
		for _, r := range name {
			if r <= ' ' || r == 0x7f {
				return false
			}
		}
	}
	return true
}

// keyPartSyntax lists the key parts keyKinds takes, as the error for one
// that is none says it, those without a name first and those of one place
// last: "ip, host, method, path, header:NAME, query:NAME, cookie:NAME,
// jwt:CLAIM or, in an RLS policy, descriptor:KEY".
var keyPartSyntax = func() string {
	var forms []string
	// Those without a name, then those with one, then those of one place.
	for pass := range 3 {
		for _, kk := range keyKinds {
			named := pass > 0
			if kk.name == "" || named != (kk.syntax != "") || (pass == 2) != (kk.where != "") {
				continue
			}
			form := kk.name
			if named {
				form += ":" + kk.syntax
			}
			if kk.where != "" {
				form = kk.where + ", " + form
			}
			forms = append(forms, form)
		}
	}
	last := forms[len(forms)-1]
	sep := " or "
	if strings.Contains(last, ", ") {
		sep = " or, "
	}
	return strings.Join(forms[:len(forms)-1], ", ") + sep + last
}()
