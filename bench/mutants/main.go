// Command mutants is limitproxy's mutation harness: it changes one operator,
// condition, constant or statement at a time in the files of a scope, runs
// the tests of the mutated file's package against each change, and reports
// per file how many mutants the tests killed, how many survived, timed out,
// did not compile or are listed as equivalent.
//
// A mutant is never written into the tree: each is handed to `go test
// -overlay`, so the working copy stays untouched and a run can be stopped at
// any moment. Tests run with -count=1 -failfast -vet=off and without -race,
// one package at a time, under a timeout per mutant.
//
//	cd bench && go run ./mutants -root .. [-j 1] [-timeout 90s] [-files limiter/driver/arith.go,...]
//	cd bench && go run ./mutants -root .. -list                 # the mutants, not run
//	cd bench && go run ./mutants -root .. -show limiter/driver/arith.go:31:1   # one mutant, with its test output
//
// The scope file (bench/mutants/scope.txt) lists the files and the test
// packages that judge them; the equivalent list (bench/mutants/equivalent.txt)
// names the survivors that no test can kill, with the reason, and they are
// left out of the score. Score = (killed + timed out) / (mutants that
// compile − equivalent).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// mutant is one textual change of a file: bytes [start, end) become repl.
type mutant struct {
	file       string // path relative to the module root
	line, col  int
	start, end int
	repl       string
	op         string // kind of mutation, e.g. "boundary", "delete"
	before     string // the mutated line, trimmed, before and after
	after      string
}

func (m *mutant) key() string { return m.file + ": " + m.before + " → " + m.after }

// scope is one file and the test packages that judge its mutants, in order:
// a later package runs only if the earlier ones pass.
type scope struct {
	file string
	pkgs []string
	run  string // -run regexp, or ""
}

type result int

const (
	killed result = iota
	survived
	timedOut
	notViable
	equivalent
)

var resultNames = [...]string{"killed", "survived", "timed out", "not viable", "equivalent"}

func main() {
	root := flag.String("root", "..", "module root (the directory holding go.mod)")
	scopeFile := flag.String("scope", "mutants/scope.txt", "scope file")
	eqFile := flag.String("equivalent", "mutants/equivalent.txt", "equivalent mutants file")
	jobs := flag.Int("j", 1, "mutants tested at once")
	timeout := flag.Duration("timeout", 90*time.Second, "timeout per mutant (all its packages)")
	flag.Int64Var(&memLimitMiB, "mem", 3072, "address-space limit of each go test and its test binary, in MiB (a mutant can allocate without bound)")
	files := flag.String("files", "", "comma-separated subset of the scope's files")
	list := flag.Bool("list", false, "list the mutants without running them")
	show := flag.String("show", "", "run one mutant FILE:LINE:N (N-th mutant on that line, from 1) and print its test output")
	lines := flag.String("lines", "", "run only the mutants on these lines: a file of FILE:LINE, one a line (e.g. an earlier run's survivors)")
	ops := flag.String("ops", "default", "operator set: default, or all (about 30% more mutants)")
	rerun := flag.String("rerun", "", "run only the mutants that survived in this -results file of an earlier run, and carry the other results over")
	resultsFile := flag.String("results", "", "also write every mutant's result to this file (tab-separated)")
	rescore := flag.String("rescore", "", "report from a -results file of an earlier run, with the current equivalent list, instead of running")
	flag.Parse()

	allOps = *ops == "all"
	absRoot, err := filepath.Abs(*root)
	check(err)
	scopes, err := readScope(*scopeFile)
	check(err)
	if *files != "" {
		want := map[string]bool{}
		for f := range strings.SplitSeq(*files, ",") {
			want[f] = true
		}
		scopes = slicesFilter(scopes, func(s scope) bool { return want[s.file] })
		if len(scopes) == 0 {
			check(errors.New("no scope file matches -files"))
		}
	}
	eq, err := readEquivalent(*eqFile)
	check(err)

	if *rescore != "" {
		all, results, err := readResults(*rescore, eq)
		check(err)
		report(os.Stdout, scopes, all, results, 0)
		return
	}

	var all []*mutant
	byFile := map[string]scope{}
	for _, s := range scopes {
		ms, err := generate(absRoot, s.file)
		check(err)
		all = append(all, ms...)
		byFile[s.file] = s
	}

	if *lines != "" {
		b, err := os.ReadFile(*lines)
		check(err)
		want := map[string]bool{}
		for l := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				want[strings.TrimSuffix(f[0], ":")] = true
			}
		}
		all = slicesFilter(all, func(m *mutant) bool { return want[m.file+":"+strconv.Itoa(m.line)] })
	}

	if *list {
		for _, m := range all {
			fmt.Printf("%s:%d:%d\t%s\t%s → %s\n", m.file, m.line, m.col, m.op, m.before, m.after)
		}
		fmt.Printf("%d mutants\n", len(all))
		return
	}

	tmp, err := os.MkdirTemp("", "mutants")
	check(err)
	defer os.RemoveAll(tmp)

	if *show != "" {
		m := find(all, *show)
		if m == nil {
			check(fmt.Errorf("no mutant %s (see -list)", *show))
		}
		r, out := runMutant(absRoot, tmp, byFile[m.file], m, *timeout)
		fmt.Printf("%s:%d:%d %s: %s → %s\n%s\nresult: %s\n", m.file, m.line, m.col, m.op, m.before, m.after, out, resultNames[r])
		return
	}

	// The unmutated tree must pass, or every mutant would look killed.
	seen := map[string]bool{}
	for _, s := range scopes {
		if k := strings.Join(s.pkgs, ",") + " " + s.run; seen[k] {
			continue
		} else {
			seen[k] = true
		}
		if r, out := runMutant(absRoot, tmp, s, nil, *timeout); r != survived {
			fmt.Fprintf(os.Stderr, "baseline fails for %s (%s):\n%s\n", s.file, resultNames[r], out)
			os.Exit(1)
		}
	}

	var resultsOut *os.File
	if *resultsFile != "" {
		resultsOut, err = os.Create(*resultsFile)
		check(err)
	}
	counts := keyCounts(all)
	start := time.Now()
	results := make([]result, len(all))
	todo := make([]int, 0, len(all))
	if *rerun != "" {
		prev, err := readPrevious(*rerun)
		check(err)
		for i, m := range all {
			if r, ok := prev[m.file+":"+strconv.Itoa(m.line)+":"+strconv.Itoa(m.col)+"\t"+m.key()]; ok && r != survived && r != equivalent {
				results[i] = r
				continue
			}
			todo = append(todo, i)
		}
	} else {
		for i := range all {
			todo = append(todo, i)
		}
	}
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	done := 0
	for range max(1, *jobs) {
		wg.Go(func() {
			for i := range next {
				m := all[i]
				r, _ := runMutant(absRoot, tmp, byFile[m.file], m, *timeout)
				if r == survived && eq.match(m, counts) {
					r = equivalent
				}
				results[i] = r
				mu.Lock()
				if resultsOut != nil {
					// As each is done, so that a run cut short can be
					// rerun from where it stopped (-rerun).
					fmt.Fprintf(resultsOut, "%s\n", resultLine(m, r))
				}
				done++
				fmt.Fprintf(os.Stderr, "[%d/%d %s] %s:%d %s: %s\n", done, len(todo), time.Since(start).Round(time.Second), m.file, m.line, m.op, resultNames[r])
				mu.Unlock()
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	if resultsOut != nil {
		// Rewritten whole, in order, with the results carried over.
		check(resultsOut.Close())
		var b strings.Builder
		for i, m := range all {
			fmt.Fprintf(&b, "%s\n", resultLine(m, results[i]))
		}
		check(os.WriteFile(*resultsFile, []byte(b.String()), 0o644))
	}
	report(os.Stdout, scopes, all, results, time.Since(start))
}

func resultLine(m *mutant, r result) string {
	return fmt.Sprintf("%s:%d:%d\t%s\t%s → %s\t%s", m.file, m.line, m.col, m.op, m.before, m.after, resultNames[r])
}

// readPrevious reads a -results file into the result of each mutant, by
// position and change.
func readPrevious(name string) (map[string]result, error) {
	all, results, err := readResults(name, nil)
	if err != nil {
		return nil, err
	}
	prev := make(map[string]result, len(all))
	for i, m := range all {
		prev[m.file+":"+strconv.Itoa(m.line)+":"+strconv.Itoa(m.col)+"\t"+m.key()] = results[i]
	}
	return prev, nil
}

// readResults reads a -results file back, marking as equivalent the
// survivors eq lists.
func readResults(name string, eq equivalents) ([]*mutant, []result, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, nil, err
	}
	var all []*mutant
	var results []result
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		fs := strings.Split(l, "\t")
		if len(fs) != 4 {
			return nil, nil, fmt.Errorf("%s: bad line %q", name, l)
		}
		pos := strings.Split(fs[0], ":")
		before, after, _ := strings.Cut(fs[2], " → ")
		m := &mutant{file: pos[0], op: fs[1], before: before, after: after}
		m.line, _ = strconv.Atoi(pos[1])
		m.col, _ = strconv.Atoi(pos[2])
		r := result(slices.Index(resultNames[:], fs[3]))
		if r < 0 {
			return nil, nil, fmt.Errorf("%s: bad result %q", name, fs[3])
		}
		if r == equivalent {
			r = survived
		}
		all = append(all, m)
		results = append(results, r)
	}
	counts := keyCounts(all)
	for i, m := range all {
		if results[i] == survived && eq.match(m, counts) {
			results[i] = equivalent
		}
	}
	return all, results, nil
}

func report(w *os.File, scopes []scope, all []*mutant, results []result, took time.Duration) {
	counts := map[string]*[5]int{}
	var total [5]int
	for i, m := range all {
		c := counts[m.file]
		if c == nil {
			c = new([5]int)
			counts[m.file] = c
		}
		c[results[i]]++
		total[results[i]]++
	}
	fmt.Fprintf(w, "%-34s %7s %8s %9s %10s %10s %7s\n", "file", "killed", "survived", "timed out", "not viable", "equivalent", "score")
	line := func(name string, c [5]int) {
		fmt.Fprintf(w, "%-34s %7d %8d %9d %10d %10d %7s\n", name, c[killed], c[survived], c[timedOut], c[notViable], c[equivalent], score(c))
	}
	for _, s := range scopes {
		if c := counts[s.file]; c != nil {
			line(s.file, *c)
		}
	}
	line("total", total)
	fmt.Fprintf(w, "\nscore = (killed + timed out) / (killed + timed out + survived) = %s, over %d mutants", score(total), len(all))
	if took > 0 {
		fmt.Fprintf(w, " (%s)", took.Round(time.Second))
	}
	fmt.Fprintln(w)
	var surv []*mutant
	for i, m := range all {
		if results[i] == survived {
			surv = append(surv, m)
		}
	}
	if len(surv) > 0 {
		fmt.Fprintf(w, "\nsurvivors (add to equivalent.txt only with the reason no test can kill them):\n")
		for _, m := range surv {
			fmt.Fprintf(w, "%s:%d:%d\t%s\t%s → %s\n", m.file, m.line, m.col, m.op, m.before, m.after)
		}
	}
}

func score(c [5]int) string {
	det := c[killed] + c[timedOut]
	if n := det + c[survived]; n > 0 {
		return fmt.Sprintf("%.1f%%", 100*float64(det)/float64(n))
	}
	return "-"
}

// memLimitMiB is -mem.
var memLimitMiB int64

// runMutant runs the scope's test packages with m applied (none if m is
// nil) and says what became of it, with the output of the last go test.
func runMutant(root, tmp string, s scope, m *mutant, timeout time.Duration) (result, string) {
	args := []string{"test", "-count=1", "-failfast", "-vet=off"}
	if m != nil {
		src, err := os.ReadFile(filepath.Join(root, m.file))
		check(err)
		mutated := string(src[:m.start]) + m.repl + string(src[m.end:])
		dir, err := os.MkdirTemp(tmp, "m")
		check(err)
		defer os.RemoveAll(dir)
		mf := filepath.Join(dir, filepath.Base(m.file))
		check(os.WriteFile(mf, []byte(mutated), 0o644))
		ov, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, m.file): mf}})
		check(err)
		of := filepath.Join(dir, "overlay.json")
		check(os.WriteFile(of, ov, 0o644))
		args = append(args, "-overlay="+of)
	}
	if s.run != "" {
		args = append(args, "-run", s.run)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []byte
	for _, p := range s.pkgs {
		// ulimit -v caps the address space of go test and the test
		// binary it starts: a mutant that allocates without bound fails
		// there instead of taking the machine's memory.
		cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `ulimit -v "$0" && exec go "$@"`, strconv.FormatInt(memLimitMiB<<10, 10)}, append(args, p)...)...)
		cmd.Dir = root
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// Kill the whole group: go test, the test binary and what it started.
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var err error
		out, err = cmd.CombinedOutput()
		switch {
		case ctx.Err() != nil:
			return timedOut, string(out)
		case err == nil:
			continue
		case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
			return notViable, string(out)
		default:
			return killed, string(out)
		}
	}
	return survived, string(out)
}

func find(all []*mutant, spec string) *mutant {
	i := strings.LastIndex(spec, ":")
	j := strings.LastIndex(spec[:max(i, 0)], ":")
	if i < 0 || j < 0 {
		return nil
	}
	line, err1 := strconv.Atoi(spec[j+1 : i])
	n, err2 := strconv.Atoi(spec[i+1:])
	if err1 != nil || err2 != nil {
		return nil
	}
	for _, m := range all {
		if m.file == spec[:j] && m.line == line {
			if n--; n == 0 {
				return m
			}
		}
	}
	return nil
}

// allOps widens the operator set (-ops all): every statement deleted,
// every integer operand off by one, ++ and -- swapped, unary minus dropped.
var allOps bool

// generate lists the mutants of file.
func generate(root, file string) ([]*mutant, error) {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var ms []*mutant
	add := func(start, end token.Pos, repl, op string) {
		s, e := fset.Position(start).Offset, fset.Position(end).Offset
		p := fset.Position(start)
		ls := bytes.LastIndexByte(src[:s], '\n') + 1
		le := e + bytes.IndexByte(src[e:], '\n')
		if le < e {
			le = len(src)
		}
		before := string(src[ls:le])
		after := string(src[ls:s]) + repl + string(src[e:le])
		ms = append(ms, &mutant{
			file: file, line: p.Line, col: p.Column, start: s, end: e, repl: repl, op: op,
			before: oneLine(before), after: oneLine(after),
		})
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil || skipFunc(fd) {
			continue // constants, types and variables are not mutated
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isMessage(n) {
					return false // error text and formatting
				}
			case *ast.BinaryExpr:
				for _, r := range binaryOps[n.Op] {
					add(n.OpPos, n.OpPos+token.Pos(len(n.Op.String())), r.String(), opKind(n.Op, r))
				}
				// Off by one: an integer constant compared to (with -ops
				// all, any operand: a step, a shift); those passed as
				// arguments or indexes are left alone.
				for _, x := range []ast.Expr{n.X, n.Y} {
					if !allOps && !isComparison(n) {
						break
					}
					lit, ok := ast.Unparen(x).(*ast.BasicLit)
					if !ok || lit.Kind != token.INT {
						continue
					}
					if v, err := strconv.ParseInt(strings.ReplaceAll(lit.Value, "_", ""), 0, 64); err == nil {
						add(lit.Pos(), lit.End(), strconv.FormatInt(v+1, 10), "constant +1")
						if v > 0 {
							add(lit.Pos(), lit.End(), strconv.FormatInt(v-1, 10), "constant −1")
						}
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.NOT || allOps && n.Op == token.SUB {
					add(n.Pos(), n.X.Pos(), "", "drop unary "+n.Op.String())
				}
			case *ast.IncDecStmt:
				if !allOps {
					break
				}
				r := token.DEC
				if n.Tok == token.DEC {
					r = token.INC
				}
				add(n.TokPos, n.TokPos+2, r.String(), "increment")
			case *ast.AssignStmt:
				if r, ok := assignOps[n.Tok]; ok {
					add(n.TokPos, n.TokPos+token.Pos(len(n.Tok.String())), r.String(), "arithmetic assign")
				}
			case *ast.IfStmt:
				if !isComparison(n.Cond) {
					add(n.Cond.Pos(), n.Cond.End(), "!("+string(src[fset.Position(n.Cond.Pos()).Offset:fset.Position(n.Cond.End()).Offset])+")", "negate")
				}
			case *ast.BlockStmt:
				for i, st := range n.List {
					if _, ret := st.(*ast.ReturnStmt); ret && (n == fd.Body && i == len(n.List)-1 || len(n.List) == 1) {
						// A function's last return does not compile
						// without; an if's only return goes with the if.
						continue
					}
					if deletable(st) {
						add(st.Pos(), st.End(), blank(src, fset, st), "delete")
					}
				}
			case *ast.CaseClause:
				for _, st := range n.Body {
					if deletable(st) {
						add(st.Pos(), st.End(), blank(src, fset, st), "delete")
					}
				}
			}
			return true
		})
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].start < ms[j].start })
	return ms, nil
}

var binaryOps = map[token.Token][]token.Token{
	token.LSS:     {token.LEQ},
	token.LEQ:     {token.LSS},
	token.GTR:     {token.GEQ},
	token.GEQ:     {token.GTR},
	token.EQL:     {token.NEQ},
	token.NEQ:     {token.EQL},
	token.LAND:    {token.LOR},
	token.LOR:     {token.LAND},
	token.ADD:     {token.SUB},
	token.SUB:     {token.ADD},
	token.MUL:     {token.QUO},
	token.QUO:     {token.MUL},
	token.REM:     {token.MUL},
	token.SHL:     {token.SHR},
	token.SHR:     {token.SHL},
	token.AND:     {token.OR},
	token.OR:      {token.AND},
	token.XOR:     {token.AND},
	token.AND_NOT: {token.AND},
}

var assignOps = map[token.Token]token.Token{
	token.ADD_ASSIGN: token.SUB_ASSIGN,
	token.SUB_ASSIGN: token.ADD_ASSIGN,
	token.MUL_ASSIGN: token.QUO_ASSIGN,
	token.QUO_ASSIGN: token.MUL_ASSIGN,
	token.OR_ASSIGN:  token.AND_ASSIGN,
	token.AND_ASSIGN: token.OR_ASSIGN,
}

func opKind(from, to token.Token) string {
	switch from {
	case token.LSS, token.LEQ, token.GTR, token.GEQ:
		if (from == token.LSS || from == token.LEQ) == (to == token.LSS || to == token.LEQ) {
			return "boundary"
		}
		return "negate comparison"
	case token.EQL, token.NEQ:
		return "negate comparison"
	case token.LAND, token.LOR:
		return "logical"
	}
	return "arithmetic"
}

func isComparison(e ast.Expr) bool {
	b, ok := ast.Unparen(e).(*ast.BinaryExpr)
	return ok && (b.Op == token.LSS || b.Op == token.LEQ || b.Op == token.GTR || b.Op == token.GEQ || b.Op == token.EQL || b.Op == token.NEQ)
}

// deletable says whether removing st is a mutation worth running: an
// assignment, a return or a whole if (with -ops all also a call, a counter
// step, a branch, a defer or a send). Declarations (:=, var) are kept,
// their removal does not compile.
func deletable(st ast.Stmt) bool {
	switch st := st.(type) {
	case *ast.AssignStmt:
		return st.Tok != token.DEFINE
	case *ast.IfStmt, *ast.ReturnStmt:
		return true
	case *ast.ExprStmt, *ast.IncDecStmt, *ast.BranchStmt, *ast.DeferStmt, *ast.SendStmt:
		return allOps
	}
	return false
}

// blank is st's replacement when deleted: its newlines only, so that the
// lines after it keep their numbers.
func blank(src []byte, fset *token.FileSet, st ast.Stmt) string {
	s, e := fset.Position(st.Pos()).Offset, fset.Position(st.End()).Offset
	return strings.Repeat("\n", bytes.Count(src[s:e], []byte("\n")))
}

// skipFunc leaves out functions whose mutants say nothing about limits:
// String and Error methods.
func skipFunc(fd *ast.FuncDecl) bool {
	return fd.Recv != nil && (fd.Name.Name == "String" || fd.Name.Name == "Error")
}

// isMessage says whether c builds an error or a message (fmt.Errorf,
// errors.New, fmt.Sprintf, paramErr): its arguments are text.
func isMessage(c *ast.CallExpr) bool {
	switch fn := c.Fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			return (x.Name == "fmt" && (fn.Sel.Name == "Errorf" || fn.Sel.Name == "Sprintf")) || (x.Name == "errors" && fn.Sel.Name == "New")
		}
	case *ast.Ident:
		return fn.Name == "paramErr"
	}
	return false
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
	if s == "" {
		return "(blank)"
	}
	return s
}

// readScope reads lines "FILE PKG[,PKG…] [run=REGEXP]"; # starts a comment.
func readScope(name string) ([]scope, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ss []scope
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if len(fs) < 2 || len(fs) > 3 {
			return nil, fmt.Errorf("%s:%d: want FILE PKG[,PKG] [run=REGEXP]", name, n)
		}
		s := scope{file: fs[0], pkgs: strings.Split(fs[1], ",")}
		if len(fs) == 3 {
			r, ok := strings.CutPrefix(fs[2], "run=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: third field must be run=REGEXP", name, n)
			}
			s.run = r
		}
		ss = append(ss, s)
	}
	return ss, sc.Err()
}

// readEquivalent reads the survivors judged equivalent, one per line as the
// report lists them, "FILE:LINE:COL<TAB>OP<TAB>BEFORE → AFTER", each
// followed by its reason on lines that start with whitespace; # starts a
// comment line. An entry names its mutant by the file and the change of
// the line, so that it holds across edits elsewhere in the file; the line
// number counts only when the file has several mutants making the same
// change.
func readEquivalent(name string) (equivalents, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return equivalents{}, nil
	}
	if err != nil {
		return nil, err
	}
	eq := equivalents{}
	for n, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' || l[0] == ' ' || l[0] == '\t' {
			continue
		}
		fs := strings.Split(l, "\t")
		if len(fs) != 3 || !strings.Contains(fs[2], " → ") {
			return nil, fmt.Errorf("%s:%d: want FILE:LINE:COL<TAB>OP<TAB>BEFORE → AFTER", name, n+1)
		}
		pos := strings.Split(fs[0], ":")
		line := 0
		if len(pos) > 1 {
			line, _ = strconv.Atoi(pos[1])
		}
		k := pos[0] + ": " + fs[2]
		eq[k] = append(eq[k], line)
	}
	return eq, nil
}

// equivalents maps a mutant's key (file and change) to the lines the list
// gives for it.
type equivalents map[string][]int

// match says whether m is listed: by its file and change when no other
// mutant of the file makes the same change (count[key] = 1), else by its
// line too.
func (eq equivalents) match(m *mutant, count map[string]int) bool {
	lines, ok := eq[m.key()]
	return ok && (count[m.key()] == 1 || slices.Contains(lines, m.line))
}

func keyCounts(all []*mutant) map[string]int {
	c := map[string]int{}
	for _, m := range all {
		c[m.key()]++
	}
	return c
}

func slicesFilter[T any](s []T, keep func(T) bool) []T {
	var out []T
	for _, v := range s {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
}
