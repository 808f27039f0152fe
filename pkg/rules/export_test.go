package rules

// NoiseLines exports the corpus of non-matching lines to the external test
// package, which benchmarks the agent's shipped rules on it.
var NoiseLines = noiseLines
