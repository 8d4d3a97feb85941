package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
)

// TokenHash is how a Member's status records its gateway token: the
// SHA-256 of the token, in hex. The token is 256 random bits, so its hash
// needs no salt, and a status or a log line never holds the token itself.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
