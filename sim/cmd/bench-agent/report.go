package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// nma are the EKS Node Monitoring Agent's figures from the side-by-side run
// on the same fake host that issue 23 reports (its module is not served
// here, so it cannot run in this benchmark).
var nma = struct {
	idleCPU, floodCPU, rssMiB, anonMiB, strippedMB float64
	latency                                        string
}{0.64, 0.068, 51.7, 10.6, 51.2, "0.5–14 s"}

// Goals of issue 23.
const (
	goalRSSMiB    = 26.0 // half the NMA's
	goalBinaryMB  = 30.0
	topPackages   = 25
	topFloor      = 12
	decimalMB     = 1e6
	ratioFallback = "–"
)

func report(c config, cur, old *agent, sizes []pkgSize, floor int64, floorLibs int, floorSizes []pkgSize) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# nodemend-agent beside its base (make bench-agent)\n\n")
	w("%s, %d CPUs (%s/%s). This tree: `%s`. Base: `%s`.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, cur.label, old.label)
	w("Both agents were built with the tags %q and ran at once, each on its own fake host root (the simulation's healthy host and\n", c.tags)
	w("agent config) against one real\n")
	w("kube-apiserver, with the production flags otherwise (metrics served, diagnostics on). Idle %v; flood %d lines/s for %v (%d lines);\n", c.idle, c.rate, c.flood, cur.floodLines)
	w("%d fatal kernel lines one at a time for the latency. The EKS Node Monitoring Agent (NMA) column holds its figures from the\n", c.faults)
	w("side-by-side run of issue 23 (its module is not served here).\n\n")

	w("| measure | this tree | base | this / base | NMA | this / NMA |\n|---|---|---|---|---|---|\n")
	row := func(name, unit string, cv, bv, nv float64, prec int) {
		nmaCell, nmaRatio := ratioFallback, ratioFallback
		if nv > 0 {
			nmaCell, nmaRatio = fmt.Sprintf("%.*f%s", prec, nv, unit), ratio(cv, nv)
		}
		w("| %s | %.*f%s | %.*f%s | %s | %s | %s |\n", name, prec, cv, unit, prec, bv, unit, ratio(cv, bv), nmaCell, nmaRatio)
	}
	row("idle CPU (% of one core)", " %", cur.idleCPU, old.idleCPU, nma.idleCPU, 3)
	row("CPU per 1,000 kernel lines (flood)", " s", cur.floodCPU, old.floodCPU, nma.floodCPU, 4)
	row("RSS, idle", " MiB", kib(cur.rss), kib(old.rss), nma.rssMiB, 1)
	row("  of which anonymous", " MiB", kib(cur.anon), kib(old.anon), nma.anonMiB, 1)
	row("  of which file-backed (the binary's pages)", " MiB", kib(cur.file), kib(old.file), nma.rssMiB-nma.anonMiB, 1)
	row("RSS after the flood", " MiB", kib(cur.floodRSS), kib(old.floodRSS), 0, 1)
	row("peak RSS (whole run)", " MiB", kib(cur.peak), kib(old.peak), 0, 1)
	row("stripped binary", " MB", float64(cur.strippedBytes)/decimalMB, float64(old.strippedBytes)/decimalMB, nma.strippedMB, 1)
	w("| fault → condition p50 | %s | %s | %s | %s | |\n", ms(cur.latP50), ms(old.latP50), ratio(sec(cur.latP50), sec(old.latP50)), nma.latency)
	w("| fault → condition max | %s | %s | %s | %s | |\n\n", ms(cur.latMax), ms(old.latMax), ratio(sec(cur.latMax), sec(old.latMax)), nma.latency)

	w("## Goals (issue 23)\n\n")
	goal := func(ok bool, format string, args ...any) {
		mark := "met"
		if !ok {
			mark = "**missed**"
		}
		w("- %s: %s\n", fmt.Sprintf(format, args...), mark)
	}
	goal(kib(cur.rss) <= goalRSSMiB, "idle RSS ≤ %.0f MiB (half the NMA's): %.1f MiB", goalRSSMiB, kib(cur.rss))
	goal(float64(cur.strippedBytes)/decimalMB <= goalBinaryMB, "stripped binary ≤ %.0f MB: %.1f MB", goalBinaryMB, float64(cur.strippedBytes)/decimalMB)
	goal(cur.idleCPU <= old.idleCPU*1.25+0.02, "idle CPU no worse than the base (within 25%% + 0.02 points, the noise of a shared machine): %.3f%% vs %.3f%%", cur.idleCPU, old.idleCPU)
	goal(cur.latP50 <= old.latP50*5/4+2*time.Millisecond, "latency p50 no worse than the base (within 25%% + 2 ms): %s vs %s", ms(cur.latP50), ms(old.latP50))
	w("\n")

	w("## This tree's binary by package\n\n")
	w("From the unstripped build's symbol table: code and data symbols, plus each group's share of the pc-line table in proportion to\n")
	w("its code (the stripped file adds headers, the symbol-free tables and alignment).\n\n")
	sizeTable(&b, sizes, topPackages)
	w("\n**Library floor:** a program that only imports the %d library packages nodemend's code in the agent imports (and does\n", floorLibs)
	w("nothing) is %.1f MB stripped: what those libraries cost by their package-level state and init functions alone. The agent is\n", float64(floor)/decimalMB)
	w("%.1f MB more: the code of the libraries it calls and its own. The floor by package:\n\n", float64(cur.strippedBytes-floor)/decimalMB)
	sizeTable(&b, floorSizes, topFloor)
	w("\n")
	w("The file-backed part of the RSS is the binary's pages mapped into the process (page cache, shared and reclaimable). It\n")
	w("follows the binary's size, not the share of the code that runs: where the page cache holds the binary in large folios\n")
	w("(FilePmdMapped in /proc/PID/smaps_rollup) a fault maps a whole folio, and text and rodata end up resident whole. The\n")
	w("anonymous part is the agent's own memory (heap, stacks, runtime).\n")
	return b.String()
}

// sizeTable writes the top groups of sizes and the rest as one row.
func sizeTable(b *strings.Builder, sizes []pkgSize, top int) {
	var total int64
	for _, s := range sizes {
		total += s.bytes
	}
	fmt.Fprintf(b, "| package group | MB | share |\n|---|---|---|\n")
	for i, s := range sizes {
		if i == top {
			var rest int64
			for _, r := range sizes[i:] {
				rest += r.bytes
			}
			fmt.Fprintf(b, "| %d other groups | %.2f | %.1f%% |\n", len(sizes)-i, float64(rest)/decimalMB, 100*float64(rest)/float64(total))
			break
		}
		fmt.Fprintf(b, "| %s | %.2f | %.1f%% |\n", s.group, float64(s.bytes)/decimalMB, 100*float64(s.bytes)/float64(total))
	}
	fmt.Fprintf(b, "| total attributed | %.2f | |\n", float64(total)/decimalMB)
}

func kib(v int64) float64 { return float64(v) / 1024 }

func sec(d time.Duration) float64 { return d.Seconds() }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func ratio(a, b float64) string {
	if b <= 0 {
		return ratioFallback
	}
	return fmt.Sprintf("%.2f×", a/b)
}
