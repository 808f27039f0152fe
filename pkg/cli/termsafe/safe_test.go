package termsafe

// Safe reports whether s needs no escaping.
func Safe(s string) bool { return String(s) == s }
