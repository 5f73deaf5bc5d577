package protocol

import (
	"errors"
	"strings"
)

// Limits of names and lists on the wire.
const (
	MaxChannelLen   = 128  // longest channel name
	MaxUIDLen       = 64   // longest user ID
	MaxWatch        = 1000 // most user IDs in one watch frame
	MaxTypingListed = 10   // most users a typing frame names
)

// Errors for names that break the rules; their text is meant for a client's
// developer.
var (
	ErrInvalidChannel = errors.New("invalid channel name: 1 to 128 letters, digits or _.-:@/#")
	ErrInvalidUID     = errors.New("invalid user ID: 1 to 64 letters, digits or _.-@")
)

// ValidChannel reports whether name is a channel name: 1 to 128 ASCII
// letters, digits or any of _.-:@/#.
func ValidChannel(name string) bool {
	return validName(name, MaxChannelLen, "_.-:@/#")
}

// ValidUID reports whether uid is a user ID: 1 to 64 ASCII letters, digits
// or any of _.-@.
func ValidUID(uid string) bool {
	return validName(uid, MaxUIDLen, "_.-@")
}

func validName(s string, max int, punct string) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		default:
			if strings.IndexByte(punct, c) < 0 {
				return false
			}
		}
	}
	return true
}

// Truncate shortens s to at most 32 bytes plus "...", to quote what a client
// sent in an error without echoing all of it.
func Truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
