// Package hostileconfig holds the hostile config documents that the config
// parser's tests and the agent's memory benchmark share.
package hostileconfig

import (
	"fmt"
	"strings"
)

// MiB is the config file size limit (config.MaxFileBytes).
const MiB = 1 << 20

// Doc is a hostile config document and a piece of the refusal it must get.
type Doc struct {
	Name string
	Data string
	Want string
}

// Hostile returns one document per way a config file can attack the
// parser: alias expansion, nesting, huge strings, density, size.
func Hostile() []Doc {
	// The classic billion laughs: nine levels, each nine aliases of the one
	// before (10^9 values expanded) in under 1 KiB.
	var laughs strings.Builder
	laughs.WriteString("a0: &a0 [lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&laughs, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 9), ","))
	}
	// An alias bomb in block style with wide leaves: 12 levels of 2.
	var wide strings.Builder
	wide.WriteString("reasons:\n  x0: &x0 {disabled: true, severity: Info, threshold: 1, quietPeriod: 1m}\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&wide, "  x%d: &x%d [*x%d, *x%d]\n", i, i, i-1, i-1)
	}
	// Merge keys are aliases too.
	merge := "base: &b {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}\n" +
		"m: &m {<<: [*b, *b, *b, *b, *b, *b, *b, *b]}\n" +
		"x: [" + strings.TrimSuffix(strings.Repeat("*m,", 2000), ",") + "]\n"
	var deepBlock strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&deepBlock, "%sk%d:\n", strings.Repeat(" ", i), i)
	}
	return []Doc{
		{"billion laughs", laughs.String(), "expands to more than 10000 values"},
		{"alias bomb, block style", wide.String(), "expands to more than 10000 values"},
		{"merge-key bomb", merge, "expands to more than 10000 values"},
		{"self-referencing alias", "a: &a [b, *a]\n", "an alias refers to a value that contains it"},
		{"deep flow nesting", strings.Repeat("[", MiB/2) + strings.Repeat("]", MiB/2), "more YAML structure"},
		{"deep nesting under the count", "monitors: " + strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested deeper than 32 levels"},
		{"deep block nesting", deepBlock.String(), "nested deeper than 32 levels"},
		{"huge scalar", "monitors:\n  networking:\n    dnsQueryName: " + strings.Repeat("a", MiB-100) + "\n", "a value of"},
		{"huge quoted scalar", "x: \"" + strings.Repeat("\\t", MiB/2-10) + "\"\n", "a value of"},
		{"dense flow list", "x: [" + strings.Repeat("1,", MiB/2-4) + "1]", "more YAML structure"},
		{"dense block list", strings.Repeat("- 1\n", MiB/4), "more YAML structure"},
		{"dense map", "{" + strings.Repeat("a: 1,", MiB/5-1) + "}", "more YAML structure"},
		{"many documents", strings.Repeat("---\n", MiB/4), "more YAML structure"},
		// Just inside the structure limit (10,000): parsed, then refused by the schema.
		{"at the structure limit", "x: [" + strings.Repeat("1,", 10_000-10) + "1]", `unknown field "x"`},
		{"over 1 MiB", "#" + strings.Repeat("x", MiB), "more than the limit"},
	}
}
