package zookeeper

import (
	"strings"
)

const hexDigits = "0123456789ABCDEF"

// encodeName returns the znode name of a lock's directory: ASCII letters, digits, '-'
// and '_' stay as they are; every other byte (including '/', '.', '%', spaces and
// UTF-8 bytes) becomes %XX. The result is never "." or "..", has no '/', and is at most
// 3*255 bytes; distinct names give distinct znodes.
func encodeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// decodeName reverses encodeName; ok is false for a znode name it could not have made.
func decodeName(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	// Only the names encodeName makes: not "a.b" or "%41" (it writes "a%2Eb", "A").
	if name := b.String(); encodeName(name) == s {
		return name, true
	}
	return "", false
}
