// Package rules turns log lines into reason matches with declarative rules:
// a cheap literal prefilter first, a regular expression only on lines that
// pass it.
package rules
