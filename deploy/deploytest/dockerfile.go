package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
)

// Instruction is one Dockerfile instruction: its keyword (upper case) and
// the rest of its (joined) lines.
type Instruction struct {
	Cmd, Args string
	Stage     int // index of the FROM it belongs to
}

// ParseDockerfile splits a Dockerfile into instructions: comments and the
// parser directive dropped, backslash continuations joined. It is enough
// for static checks, not a BuildKit front end.
func ParseDockerfile(data []byte) []Instruction {
	var out []Instruction
	var cur strings.Builder
	stage := -1
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, Instruction{Cmd: cmd, Args: strings.TrimSpace(args), Stage: stage})
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

// ShellCommands splits the shell form of a RUN instruction into its simple
// commands (separated by &&, ||, ; and |), each as its words, with RUN's
// own flags (--mount=…) and leading VAR=value assignments dropped; the
// exec form (a JSON array) is one command. Quotes are not interpreted:
// a quoted word stays as written, so a check that looks for known
// commands does not recognise it and fails rather than misreads it.
func ShellCommands(run string) [][]string {
	run = strings.TrimSpace(run)
	if strings.HasPrefix(run, "[") {
		var argv []string
		if json.Unmarshal([]byte(run), &argv) == nil {
			return [][]string{argv}
		}
	}
	words := strings.Fields(run)
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	var out [][]string
	var cur []string
	end := func() {
		for len(cur) > 0 && isAssignment(cur[0]) {
			cur = cur[1:]
		}
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur = nil
	}
	for _, w := range words {
		switch {
		case w == "&&" || w == "||" || w == ";" || w == "|":
			end()
		case strings.HasSuffix(w, ";") && w != ";":
			cur = append(cur, strings.TrimSuffix(w, ";"))
			end()
		default:
			cur = append(cur, w)
		}
	}
	end()
	return out
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// AptCommand is an apt-get or apt command line, read.
type AptCommand struct {
	Subcommand string   // install, update, clean, …
	Options    []string // as written, with the value of -o/-c/-t joined by "="
	Args       []string // the rest: an install's packages
}

// aptOptionsWithValue are apt-get's options that take the next word as
// their value unless written as option=value.
var aptOptionsWithValue = map[string]bool{
	"-o": true, "--option": true, "-c": true, "--config-file": true,
	"-t": true, "--target-release": true, "--default-release": true,
}

// ReadApt reads cmd (a word list from ShellCommands) as an apt-get or
// apt command; ok is false for any other command.
func ReadApt(cmd []string) (a AptCommand, ok bool) {
	if len(cmd) == 0 || (cmd[0] != "apt-get" && cmd[0] != "apt") {
		return a, false
	}
	for i := 1; i < len(cmd); i++ {
		w := cmd[i]
		switch {
		case aptOptionsWithValue[w] && i+1 < len(cmd):
			a.Options = append(a.Options, w+"="+cmd[i+1])
			i++
		case strings.HasPrefix(w, "-"):
			a.Options = append(a.Options, w)
		case a.Subcommand == "":
			a.Subcommand = w
		default:
			a.Args = append(a.Args, w)
		}
	}
	return a, true
}

// AptInstalls lists the packages the apt-get/apt install commands of the
// RUN instructions among ins install, in order.
func AptInstalls(ins []Instruction) []string {
	var pkgs []string
	for _, i := range ins {
		if i.Cmd != "RUN" {
			continue
		}
		for _, cmd := range ShellCommands(i.Args) {
			if a, ok := ReadApt(cmd); ok && a.Subcommand == "install" {
				pkgs = append(pkgs, a.Args...)
			}
		}
	}
	return pkgs
}
