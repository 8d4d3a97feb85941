// Package textcut shortens text to a number of bytes without splitting a
// UTF-8 character: the one rule every bounded message, tail and excerpt in
// fleetd follows.
package textcut

import "unicode/utf8"

// Head is the longest start of s that is at most n bytes and ends on a
// character boundary.
func Head(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tail is the longest end of s that is at most n bytes and starts on a
// character boundary.
func Tail(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:]
}
