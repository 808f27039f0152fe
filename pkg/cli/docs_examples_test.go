package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// shellWords splits a command line as a shell would for the docs'
// examples: words, single and double quotes, $(…) kept whole, a comment
// from an unquoted #.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			quoted := line[i+1 : i+1+j]
			if strings.HasPrefix(quoted, "$(") {
				quoted = "https://bucket.example.com/presigned" // a command substitution's output
			}
			cur.WriteString(quoted)
			i += j + 1
			inWord = true
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			j := strings.IndexByte(line[i:], ')')
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString("https://bucket.example.com/presigned")
			i += j
			inWord = true
		case c == '#' && !inWord:
			i = len(line)
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// synopsis lines show the grammar ([optional], a|b, NODE...), not a command.
var synopsis = regexp.MustCompile(`\[|\||\(NODE|\bNODE\.\.\.|\.\.\.\s*$`)

// placeholder is an upper-case word standing for a value.
var placeholder = regexp.MustCompile(`\b[A-Z][A-Z0-9_]+\b`)

// described is the gap before a description in a table of commands.
var described = regexp.MustCompile(`\s{2,}[a-z]`)

// docExamples returns every `kubectl mend …` line of a code block of the
// docs and the README, with where it is.
func docExamples(t *testing.T) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	out := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for n, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			if !inBlock {
				continue
			}
			l := strings.TrimPrefix(strings.TrimSpace(line), "$ ")
			if !strings.HasPrefix(l, "kubectl mend ") {
				continue
			}
			if loc := described.FindStringIndex(l); loc != nil {
				l = l[:loc[0]] // a table of commands: the description follows
			}
			if i := strings.Index(l, " | "); i > 0 && !strings.Contains(l[:i], "'") && !strings.Contains(l[:i], `"`) {
				l = l[:i] // piped into another tool
			}
			words := shellWords(l)
			if synopsis.MatchString(strings.Join(words, " ")) {
				continue
			}
			for i, w := range words {
				// Placeholders (NODE, NAME, SELECTOR) stand for names.
				words[i] = placeholder.ReplaceAllStringFunc(w, strings.ToLower)
			}
			out[filepath.Base(f)+":"+itoa(n+1)+": "+l] = words[2:]
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDocExamplesParse: every `kubectl mend …` example in the docs runs as
// written as far as the command's own checks go: the command exists, its
// flags parse, and its validation (before any request) accepts it.
func TestDocExamplesParse(t *testing.T) {
	examples := docExamples(t)
	if len(examples) < 15 {
		t.Fatalf("only %d examples found in the docs", len(examples))
	}
	for where, args := range examples {
		root := NewRootCommand(Streams{In: strings.NewReader(""), Out: &strings.Builder{}, Err: &strings.Builder{}})
		cmd, rest, err := root.Find(args)
		if err != nil || cmd == root {
			t.Errorf("%s: no such command (%v)", where, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		pos := cmd.Flags().Args()
		if cmd.Args != nil {
			if err := cmd.Args(cmd, pos); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
		}
		if cmd.PreRunE != nil {
			if err := cmd.PreRunE(cmd, pos); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
}

// TestDocExamplesCatchWrongOnes: the check fails on the example the docs
// once had, --gpu-diagnostic 2, which the command refuses.
func TestDocExamplesCatchWrongOnes(t *testing.T) {
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: &strings.Builder{}, Err: &strings.Builder{}})
	cmd, rest, _ := root.Find(shellWords("logs NODE --gpu-diagnostic 2 --categories accelerators"))
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, cmd.Flags().Args()); err == nil || !strings.Contains(err.Error(), "--gpu-diagnostic=2") {
		t.Fatalf("err = %v", err)
	}
}
