package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// The shells' completion scripts are made from the command table, so they
// offer every command and flag there is: the table is their one source.

// completionShells are the shells `completion` writes a script for.
func completionShells() []string { return []string{"bash", "zsh", "fish"} }

// compFlag is one flag of a command, for completion.
type compFlag struct {
	name  string
	usage string
	value string // "" for a boolean flag; "file", "dir" or "value"
}

// compCommand is one command, for completion.
type compCommand struct {
	name, summary string
	flags         []compFlag
	args          []string
	files         bool
}

// pathFlags are the flags whose value is a file ("file") or directory
// ("dir").
var pathFlags = map[string]string{"config": "file", "against": "file", "svg": "dir"}

// completionTable returns the command table as completion needs it: the
// top level first.
func completionTable() []compCommand {
	out := make([]compCommand, 0, len(commands))
	for i := range commands {
		c := &commands[i]
		fs := flag.NewFlagSet(c.title(), flag.ContinueOnError)
		c.flags(fs, io.Discard, io.Discard)
		cc := compCommand{name: c.name, summary: c.summary, args: c.args, files: c.files}
		fs.VisitAll(func(f *flag.Flag) {
			v := "value"
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				v = ""
			} else if k, ok := pathFlags[f.Name]; ok {
				v = k
			}
			_, u := flag.UnquoteUsage(f)
			cc.flags = append(cc.flags, compFlag{name: f.Name, usage: u, value: v})
		})
		cc.flags = append(cc.flags, compFlag{name: "h", usage: "print this command's help"})
		out = append(out, cc)
	}
	return out
}

// completion writes the completion script of shell to w.
func completion(shell string, w io.Writer) error {
	t := completionTable()
	switch shell {
	case "bash":
		return writeBash(w, t)
	case "zsh":
		return writeZsh(w, t)
	case "fish":
		return writeFish(w, t)
	}
	return usageError{fmt.Sprintf("completion: %q: the shells are %s\n%s", shell, strings.Join(completionShells(), ", "), commandUsage("completion"))}
}

func writeBash(w io.Writer, t []compCommand) error {
	var b strings.Builder
	b.WriteString(`# bash completion for limitproxy, made by "limitproxy completion bash".
# Load it with: source <(limitproxy completion bash)
_limitproxy() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
`)
	var names []string
	for _, c := range t[1:] {
		names = append(names, c.name)
	}
	fmt.Fprintf(&b, "            %s) cmd=${COMP_WORDS[i]}; break ;;\n", strings.Join(names, "|"))
	b.WriteString("        esac\n    done\n    local flags words files\n    case $cmd in\n")
	for _, c := range t {
		var flags, fileFlags, dirFlags, valueFlags []string
		for _, f := range c.flags {
			flags = append(flags, "-"+f.name)
			switch f.value {
			case "file":
				fileFlags = append(fileFlags, "-"+f.name)
			case "dir":
				dirFlags = append(dirFlags, "-"+f.name)
			case "value":
				valueFlags = append(valueFlags, "-"+f.name)
			}
		}
		words := c.args
		if c.name == "" {
			words = names
		}
		label := c.name
		if label == "" {
			label = `""`
		}
		fmt.Fprintf(&b, "        %s)\n", label)
		fmt.Fprintf(&b, "            flags=%q words=%q files=%v\n", strings.Join(flags, " "), strings.Join(words, " "), c.files)
		b.WriteString("            case $prev in\n")
		if len(fileFlags) > 0 {
			fmt.Fprintf(&b, "                %s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", strings.Join(fileFlags, "|"))
		}
		if len(dirFlags) > 0 {
			fmt.Fprintf(&b, "                %s) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n", strings.Join(dirFlags, "|"))
		}
		if len(valueFlags) > 0 {
			fmt.Fprintf(&b, "                %s) COMPREPLY=(); return ;;\n", strings.Join(valueFlags, "|"))
		}
		b.WriteString("            esac\n            ;;\n")
	}
	b.WriteString(`    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ $files == true ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}
complete -o filenames -F _limitproxy limitproxy
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote escapes s for a description inside an _arguments spec or a
// _describe entry, itself in single quotes.
func zshQuote(s string) string {
	r := strings.NewReplacer(`'`, `'\''`, `[`, `\[`, `]`, `\]`, `:`, `\:`)
	return r.Replace(s)
}

func writeZsh(w io.Writer, t []compCommand) error {
	var b strings.Builder
	b.WriteString(`#compdef limitproxy
# zsh completion for limitproxy, made by "limitproxy completion zsh".
# Load it with: source <(limitproxy completion zsh), or save it as
# _limitproxy in a directory of $fpath.
_limitproxy() {
    local -a commands
    commands=(
`)
	for _, c := range t[1:] {
		fmt.Fprintf(&b, "        '%s:%s'\n", c.name, zshQuote(c.summary))
	}
	b.WriteString("    )\n    if (( CURRENT == 2 )) && [[ $PREFIX != -* ]]; then\n        _describe -t commands 'limitproxy command' commands\n        return\n    fi\n")
	b.WriteString("    local cmd=''\n    if (( ${commands[(I)${words[2]}:*]} )); then\n        cmd=${words[2]}\n        shift words\n        (( CURRENT-- ))\n    fi\n    case $cmd in\n")
	for _, c := range t {
		label := c.name
		if label == "" {
			label = "''"
		}
		fmt.Fprintf(&b, "        %s)\n            _arguments -S \\\n", label)
		for _, f := range c.flags {
			spec := fmt.Sprintf("-%s[%s]", f.name, zshQuote(f.usage))
			switch f.value {
			case "file":
				spec += ":file:_files"
			case "dir":
				spec += ":directory:_files -/"
			case "value":
				spec += ":" + f.name + ": "
			}
			fmt.Fprintf(&b, "                '%s' \\\n", spec)
		}
		switch {
		case c.files:
			b.WriteString("                '*:file:_files'\n")
		case len(c.args) > 0:
			fmt.Fprintf(&b, "                '1:argument:(%s)'\n", strings.Join(c.args, " "))
		default:
			b.WriteString("                && return\n")
		}
		b.WriteString("            ;;\n")
	}
	b.WriteString(`    esac
}
if [[ $funcstack[1] == _limitproxy ]]; then
    _limitproxy "$@"
else
    compdef _limitproxy limitproxy
fi
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, t []compCommand) error {
	var b strings.Builder
	b.WriteString("# fish completion for limitproxy, made by \"limitproxy completion fish\".\n" +
		"# Load it with: limitproxy completion fish | source, or save it as\n" +
		"# ~/.config/fish/completions/limitproxy.fish\n" +
		"complete -c limitproxy -f\n")
	for _, c := range t[1:] {
		fmt.Fprintf(&b, "complete -c limitproxy -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range t {
		cond := "__fish_use_subcommand"
		if c.name != "" {
			cond = "'__fish_seen_subcommand_from " + c.name + "'"
		}
		for _, f := range c.flags {
			fmt.Fprintf(&b, "complete -c limitproxy -n %s -o %s", cond, f.name)
			switch f.value {
			case "file":
				b.WriteString(" -r -F")
			case "dir":
				b.WriteString(" -r -a '(__fish_complete_directories)'")
			case "value":
				b.WriteString(" -r")
			}
			fmt.Fprintf(&b, " -d %s\n", fishQuote(f.usage))
		}
		if c.files {
			fmt.Fprintf(&b, "complete -c limitproxy -n %s -F\n", cond)
		}
		if len(c.args) > 0 {
			fmt.Fprintf(&b, "complete -c limitproxy -n %s -a %s\n", cond, fishQuote(strings.Join(c.args, " ")))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
