package deploytest

import (
	"bufio"
	"bytes"
	"strings"
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
