package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks: every relative link of README.md, CHANGELOG.md and docs/
// names a file of the repository, and every #fragment a heading of the
// page it points to (GitHub's anchors: lower case, punctuation dropped,
// spaces as hyphens, a repeated heading suffixed -1, -2...).
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	fences := regexp.MustCompile("(?ms)^```.*?^```")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	url := regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fences.ReplaceAllString(string(src), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if url.MatchString(target) {
				continue // a URL
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			checked++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[frag] {
				t.Errorf("%s: link %s: no heading of %s has the anchor #%s", page, target, file, frag)
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d relative links found: the pattern is broken", checked)
	}
}

// anchors returns the anchors GitHub gives the headings of a Markdown file.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*$`)
	linkText := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	out, seen := map[string]bool{}, map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(string(src), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(linkText.ReplaceAllString(m[1], "$1")) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}
